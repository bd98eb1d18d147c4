# frozen_string_literal: true

module Bench
  # One fixed rate's JMeter results (Bench::JMeter#run) cut to the measured window: from
  # `warmup` seconds after every thread was running, for `seconds` (less if JMeter stopped
  # earlier). The threads start one after another, and the first slots of a schedule go out
  # together, so the start is not measured. A request counts in the window it was sent in,
  # answered or not, so a slow answer cannot leave the window and take its latency with it.
  class OpenLoopWindow
    # @return [Float] the requests/s the schedules offered
    attr_reader :offered
    # @return [Integer] JMeter's threads (the most requests it had in flight)
    attr_reader :threads
    # @return [Array<Bench::JMeter::Sample>] the requests sent in the window, by start
    attr_reader :samples

    # @param result [Hash] from Bench::JMeter#run
    # @param warmup [Numeric] seconds left out once every thread runs
    # @param seconds [Numeric] seconds measured
    def initialize(result, warmup:, seconds:)
      @offered = result[:offered]
      @threads = result[:threads]
      all = result[:samples].sort_by(&:start)
      raise ArgumentError, "JMeter sent no request" if all.empty?

      running = all.find { |sample| sample.threads >= @threads } || all.first
      @from = running.start + (warmup * 1000)
      @to = [@from + (seconds * 1000), all.last.start].min
      @samples = all.select { |sample| sample.start >= @from && sample.start < @to }
      @latencies = @samples.map(&:elapsed).sort
    end

    # @return [Float] seconds measured
    def seconds
      (@to - @from) / 1000.0
    end

    # @return [Float] requests/s sent in the window (below the offered rate when JMeter had no
    #   free thread for a slot: every thread was waiting on an answer)
    def achieved
      seconds.positive? ? @samples.size / seconds : 0.0
    end

    # @return [Integer, nil] latency in ms at `share` of the requests (nearest rank), answered
    #   or not (a timeout counts with the time JMeter waited)
    def percentile(share)
      return nil if @latencies.empty?

      @latencies[[(share * @latencies.size).ceil - 1, 0].max]
    end

    # @return [Integer, nil] the slowest request's ms
    def max
      @latencies.last
    end

    # How evenly the requests left: the sends in each 100 ms of the window.
    # @return [Array(Integer, Integer, Integer)] the fewest, the median and the most
    def sends_per_100ms
      bins = Array.new([((@to - @from) / 100.0).floor, 1].max, 0)
      @samples.each { |sample| bins[(sample.start - @from) / 100] += 1 if (sample.start - @from) / 100 < bins.size }
      sorted = bins.sort
      [sorted.first, sorted[sorted.size / 2], sorted.last]
    end

    # @return [Integer] requests with no answer within the response timeout
    def timeouts
      @samples.count { |sample| sample.error&.include?("SocketTimeoutException") }
    end

    # @param expected [Integer] the HTTP status of success
    # @return [Integer] requests answered with another status, or whose connection failed
    #   (timeouts apart)
    def errors(expected)
      @samples.count { |sample| sample.status != expected } - timeouts
    end
  end
end
