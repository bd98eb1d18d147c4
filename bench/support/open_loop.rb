# frozen_string_literal: true

require "net/http"

module Bench
  # Load at a fixed rate, whatever the server does (open loop): request i is due at
  # start + i / rate and is sent then on a new connection from a thread of its own, even while
  # earlier ones wait for their answers. Its latency counts from when it was due, so a server
  # that falls behind shows it in the percentiles instead of slowing the load down (which a
  # closed-loop tool such as wrk, or `hey -q`, whose workers wait for each answer, does).
  class OpenLoop
    # @param rate [Numeric] requests per second
    # @param seconds [Numeric] how long to send
    # @param timeout [Numeric] seconds a request may take before it counts as an error
    def initialize(rate:, seconds:, timeout: 30)
      @rate = rate
      @seconds = seconds
      @timeout = timeout
    end

    # Sends the requests and waits for the last answer.
    # @yieldparam http [Net::HTTP] a started session, @yieldparam number [Integer] 0, 1, ...
    # @yieldreturn [Net::HTTPResponse]
    # @return [Hash] :sent, :ok (2xx), :errors, :p50/:p99/:max latency in ms (of the 2xx
    #   answers), :rps (2xx answers per second, from the first due time to the last answer)
    def run(host, port, &request)
      started = now
      threads = Array.new((@rate * @seconds).round) do |number|
        due = started + (number.to_f / @rate)
        pause = due - now
        sleep pause if pause.positive?
        Thread.new { attempt(host, port, due, number, &request) }
      end
      outcomes = threads.map(&:value)
      summary(outcomes, now - started)
    end

    private

    # @return [Float, nil] seconds from due to answer for a 2xx answer, nil otherwise
    def attempt(host, port, due, number)
      response = Net::HTTP.start(host, port, open_timeout: @timeout, read_timeout: @timeout) { |http| yield http, number }
      response.is_a?(Net::HTTPSuccess) ? now - due : nil
    rescue StandardError
      nil
    end

    def summary(outcomes, elapsed)
      latencies = outcomes.compact.sort
      percentile = ->(share) { latencies.empty? ? nil : latencies[((latencies.size - 1) * share).round] * 1000 }
      { sent: outcomes.size, ok: latencies.size, errors: outcomes.size - latencies.size,
        rps: latencies.size / elapsed, p50: percentile.call(0.50), p99: percentile.call(0.99), max: percentile.call(1.0) }
    end

    def now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end
  end
end
