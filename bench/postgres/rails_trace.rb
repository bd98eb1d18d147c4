# frozen_string_literal: true

# Where a Rails request's time goes on Weft's pool (issue #12): the Rails app of
# bench/postgres/rails_bench.rb under `weft serve -w 0` with WEFT_PG_TRACE set (see
# Weft::Postgres::Trace), loaded by wrk's closed loop, then each request's timeline taken
# apart: the wait for each statement's pipeline slot, its flush, its time out on the connection
# and the wake-up of its fiber; the lease of the transaction (wait, hold, the statements in it);
# what each of the pool's connections spent its time on; and its hand-overs (what a connection
# did next once a pg_sleep's answer was read, and what became of one drained for a lease).
#
#   bundle exec ruby bench/postgres/rails_trace.rb [seconds] [connections]   # runs and reports
#   bundle exec ruby bench/postgres/rails_trace.rb --file TRACE [from] [to]  # reports a trace
#
# Tracing costs the server a little (an event is an Array and a clock read, ~30 a request), so
# its requests/s are not the benchmark's.

require "tmpdir"
require_relative "rails_bench"

module PostgresBench
  # Runs the traced load and takes the timeline apart.
  module RailsTrace
    # Seconds of the run left out at its start (connections opening, statements being learnt).
    SKIP = 1.0

    module_function

    # @return [Array(String, Float, Float, Hash)] the trace's path, the measured window's start
    #   and end (monotonic), wrk's figures
    def run(seconds, connections)
      path = File.join(Dir.tmpdir, "weft-rails-trace-#{Process.pid}.log")
      File.delete(path) if File.exist?(path)
      RailsBench.prepare("weft")
      env = RailsBench.environment("weft").merge("WEFT_PG_TRACE" => path)
      from = to = wrk = nil
      HttpBench.serve("rails-trace", RailsBench.server("weft")[:command], env) do |port, _log|
        url = "http://127.0.0.1:#{port}/"
        HttpBench.wrk_url(url, 3, 20, script: RailsBench::SCRIPT, script_args: ["warm-up", RailsBench::AUTHORS.to_s])
        RailsBench.wait_idle("weft_rails_weft")
        from = PostgresBench.now + SKIP
        wrk = HttpBench.wrk_url(url, seconds, connections, script: RailsBench::SCRIPT,
                                                            script_args: ["closed", RailsBench::AUTHORS.to_s])
        to = PostgresBench.now
        RailsBench.wait_idle("weft_rails_weft") # what wrk left in flight ends before the server is stopped
      end
      [path, from, to, wrk]
    end

    Event = Struct.new(:at, :fiber, :name, :connection, :detail)

    # @return [Array<Event>] in time order
    def load(path)
      File.foreach(path).filter_map do |line|
        at, fiber, name, connection, detail = line.split(" ", 5)
        next unless detail # a line cut short
        detail = detail.strip
        Event.new(Float(at), fiber, name.to_sym, connection == "-" ? nil : connection, detail == "-" ? nil : detail)
      end.sort_by(&:at)
    end

    # The phases of each request that started and ended in [from, to].
    # @return [Hash{String => Array<Float>}] phase => seconds, one value per request (or step)
    def phases(events, from, to)
      answered = Hash.new { |hash, key| hash[key] = [] } # request id => times answered
      written = Hash.new { |hash, key| hash[key] = [] }  # connection => times a flush wrote
      events.each do |event|
        case event.name
        when :answered then answered[event.detail] << event.at
        when :written then written[event.connection] << event.at
        end
      end
      phases = Hash.new { |hash, key| hash[key] = [] }
      events.group_by(&:fiber).each_value do |timeline|
        each_request(timeline) do |request|
          next unless request.first.at >= from && request.last.at <= to
          take_apart(request, phases, answered, written)
        end
      end
      phases
    end

    # Yields each request's events, request_start to request_end.
    def each_request(timeline)
      current = nil
      timeline.each do |event|
        current = [] if event.name == :request_start
        next unless current
        current << event
        if event.name == :request_end
          yield current
          current = nil
        end
      end
    end

    def first_after(times, at)
      times.bsearch { |time| time >= at }
    end

    # Adds one request's phases to `phases` (seconds).
    def take_apart(request, phases, answered, written)
      phases["request total"] << request.last.at - request.first.at
      accounted = 0.0
      step = 0
      query = nil
      lease = nil
      statement = nil
      request.each do |event|
        case event.name
        when :query
          step += 1
          query = { name: "#{step}. #{event.detail}", at: event.at }
        when :slot_wait then query[:slot_wait] = event.at
        when :alone then query[:alone] = event.at
        when :submit
          query[:submit] = event.at
          query[:id] = event.detail.split("/").first
          query[:slow] = event.detail.end_with?("/slow")
          query[:connection] = event.connection
        when :done
          name = query[:name]
          total = event.at - query[:at]
          accounted += total
          phases["#{name}: total"] << total
          if query[:submit]
            answer = first_after(answered[query[:id]], query[:submit])
            sent = first_after(written[query[:connection]], query[:submit])
            phases["#{name}: to a pipeline slot#{' (queued)' if query[:slot_wait]}"] << query[:submit] - query[:at]
            if sent && answer && sent <= answer
              phases["#{name}: submitted to written"] << sent - query[:submit]
              phases["#{name}: written to answered"] << answer - sent
              phases["#{name}: answered to caller back"] << event.at - answer
            end
          elsif query[:alone]
            phases["#{name}: alone on a free connection"] << event.at - query[:alone]
          end
          query = nil
        when :lease_ask
          step += 1
          lease = { name: "#{step}. transaction (lease)", at: event.at, statements: 0, in_statements: 0.0 }
        when :lease_queued then lease[:queued] = true
        when :drain then lease[:drained] = true
        when :lease_got
          lease[:got] = event.at
          how = if lease[:drained] then " (queued, began a drain)"
                elsif lease[:queued] then " (queued)"
                else ""
                end
          phases["#{lease[:name]}: wait#{how}"] << event.at - lease[:at]
        when :lease_exec then statement = event
        when :lease_exec_done
          took = event.at - statement.at
          phases["#{lease[:name]}: #{statement.detail}"] << took
          lease[:in_statements] += took
        when :lease_release
          next unless lease&.dig(:got)
          hold = event.at - lease[:got]
          phases["#{lease[:name]}: held"] << hold
          phases["#{lease[:name]}: held, between statements"] << hold - lease[:in_statements]
          accounted += event.at - lease[:at]
          lease = nil
        end
      end
      phases["outside the pool (Rails, reactor)"] << request.last.at - request.first.at - accounted
    end

    # What each connection spent [from, to] on: a pg_sleep in flight, a lease, other
    # statements in flight (pipelined or alone), nothing.
    # @return [Hash{String => Float}] share of the window, averaged over connections
    def connection_use(events, from, to)
      sleeping = Hash.new { |hash, key| hash[key] = [] }
      leased = Hash.new { |hash, key| hash[key] = [] }
      other = Hash.new { |hash, key| hash[key] = [] }
      submitted = {} # request id => [connection, slow?, submitted at]
      flushes = Hash.new { |hash, key| hash[key] = [] }
      opened = {}
      alone = {}
      events.each do |event|
        case event.name
        when :written then flushes[event.connection] << event.at
        when :submit
          id, slow = event.detail.split("/")
          submitted[id] = [event.connection, slow == "slow", event.at]
        when :answered
          connection, slow, at = submitted.delete(event.detail)
          next unless connection
          sent = first_after(flushes[connection], at) || at
          (slow ? sleeping : other)[connection] << [sent, event.at]
        when :lease_got then opened[event.connection] = event.at
        when :lease_release
          at = opened.delete(event.connection)
          leased[event.connection] << [at, event.at] if at
        when :alone then alone[event.fiber] = [event.connection, event.at, nil]
        when :query then alone.delete(event.fiber)
        when :done
          connection, at = alone.delete(event.fiber)
          other[connection] << [at, event.at] if connection
        end
      end
      connections = (sleeping.keys + leased.keys + other.keys).uniq
      window = to - from
      totals = Hash.new(0.0)
      connections.each do |connection|
        # Time counts once, in the first of: pg_sleep in flight, leased, other statements.
        taken = []
        [["pg_sleep in flight", sleeping], ["leased (transaction)", leased], ["other statements in flight", other]].each do |label, intervals|
          own = union(clip(intervals[connection], from, to))
          share = subtract_length(own, taken)
          totals[label] += share / window
          taken = union(taken + own)
        end
        totals["nothing in flight, not leased"] += (window - length(taken)) / window
      end
      totals.transform_values { |value| value / connections.size }.merge("connections" => connections.size)
    end

    # What each connection did once a pg_sleep's answer was read: nothing to wait for (another
    # statement was in flight behind the sleep already), or, after how long, the next write or
    # lease; and what became of each connection drained for a caller waiting to lease: leased,
    # or pipelined again (the drain for nothing), after how long since its last answer.
    # @return [Hash{String => Array<Float>}] outcome => seconds, one value per occurrence
    def handovers(events, from, to)
      last_tag = {}
      per_connection = Hash.new { |hash, key| hash[key] = [] }
      sleeps = Hash.new(0)
      events.each do |event|
        last_tag[event.fiber] = event.detail if event.name == :query
        if event.name == :submit && last_tag[event.fiber] == "sleep" && event.at.between?(from, to)
          sleeps[event.detail.end_with?("/slow") ? "known as slow" : "not known as slow"] += 1
        end
        per_connection[event.connection] << event if event.connection
      end
      outcomes = Hash.new { |hash, key| hash[key] = [] }
      per_connection.each_value do |timeline|
        # Submitted and not yet answered: request id => whether known as slow (a fiber reuses
        # its request object, so an id means a statement only while it is in flight).
        in_flight = {}
        timeline.each_with_index do |event, index|
          in_flight[event.detail.split("/").first] = event.detail.end_with?("/slow") if event.name == :submit
          slow = in_flight.delete(event.detail) if event.name == :answered
          next unless event.at.between?(from, to)
          if event.name == :drain
            last_answer = event.at
            timeline[(index + 1)..].each do |after|
              case after.name
              when :answered then last_answer = after.at
              when :lease_got then break outcomes["drained: then leased (last answer to lease)"] << after.at - last_answer
              when :submit then break outcomes["drained: then pipelined again (last answer to submit)"] << after.at - last_answer
              end
            end
          elsif event.name == :answered && slow
            unless in_flight.empty?
              outcomes["pg_sleep answered: the next statement was queued behind it"] << 0.0
              next
            end
            timeline[(index + 1)..].each do |after|
              case after.name
              when :written then break outcomes["pg_sleep answered: then the next write"] << after.at - event.at
              when :lease_got then break outcomes["pg_sleep answered: then leased"] << after.at - event.at
              end
            end
          end
        end
      end
      sleeps.each { |mark, count| outcomes["pg_sleeps pipelined, #{mark}"] = Array.new(count, 0.0) }
      outcomes
    end

    def clip(intervals, from, to)
      intervals.filter_map do |start, stop|
        start = [start, from].max
        stop = [stop, to].min
        [start, stop] if stop > start
      end
    end

    def union(intervals)
      intervals.sort.each_with_object([]) do |(start, stop), merged|
        if merged.last && start <= merged.last[1]
          merged.last[1] = [merged.last[1], stop].max
        else
          merged << [start, stop]
        end
      end
    end

    def length(intervals)
      intervals.sum { |start, stop| stop - start }
    end

    # The length of `intervals` (merged) outside `taken` (merged).
    def subtract_length(intervals, taken)
      length(intervals) - intervals.sum do |start, stop|
        taken.sum { |other_start, other_stop| [[stop, other_stop].min - [start, other_start].max, 0].max }
      end
    end

    def percentile(sorted, fraction)
      sorted[[(sorted.size * fraction).ceil - 1, 0].max]
    end

    # @return [String] the report, Markdown
    def report(events, from, to, wrk = nil)
      phases = phases(events, from, to)
      requests = phases["request total"].size
      lines = []
      lines << format("Window %.1f s, %d requests traced start to end%s.", to - from, requests,
                      wrk ? format(" (wrk: %.1f req/s, p50 %s ms, p99 %s ms)", wrk[:rps], wrk[:p50], wrk[:p99]) : "")
      lines << ""
      lines << "| phase | n | mean ms | p50 ms | p90 ms | p99 ms |"
      lines << "|---|---|---|---|---|---|"
      phases.keys.sort_by { |key| [key.start_with?("request") ? 0 : key.start_with?("outside") ? 2 : 1, key] }.each do |key|
        values = phases[key].sort
        ms = ->(value) { format("%.2f", value * 1000) }
        lines << "| #{key} | #{values.size} | #{ms.call(values.sum / values.size)} | #{ms.call(percentile(values, 0.5))} | " \
                 "#{ms.call(percentile(values, 0.9))} | #{ms.call(percentile(values, 0.99))} |"
      end
      use = connection_use(events, from, to)
      lines << ""
      lines << "What the pool's #{use.delete('connections')} connections spent the window on (share of time, mean over connections):"
      lines << ""
      use.each { |label, share| lines << format("- %s: %.1f%%", label, share * 100) }
      lines << ""
      lines << "Hand-overs (a connection's next use after a pg_sleep's answer was read; connections drained for a lease):"
      lines << ""
      lines << "| what | n | mean ms | p50 ms | p90 ms |"
      lines << "|---|---|---|---|---|"
      handovers(events, from, to).sort.each do |what, values|
        values = values.sort
        ms = ->(value) { format("%.2f", value * 1000) }
        lines << "| #{what} | #{values.size} | #{ms.call(values.sum / values.size)} | #{ms.call(percentile(values, 0.5))} | " \
                 "#{ms.call(percentile(values, 0.9))} |"
      end
      lines.join("\n")
    end
  end
end

if $PROGRAM_NAME == __FILE__
  if ARGV[0] == "--file"
    events = PostgresBench::RailsTrace.load(ARGV.fetch(1))
    from = ARGV[2] ? Float(ARGV[2]) : events.first.at + PostgresBench::RailsTrace::SKIP
    to = ARGV[3] ? Float(ARGV[3]) : events.last.at
    puts PostgresBench::RailsTrace.report(events, from, to)
  else
    seconds = Integer(ARGV.fetch(0, 5))
    connections = Integer(ARGV.fetch(1, 200))
    path, from, to, wrk = PostgresBench::RailsTrace.run(seconds, connections)
    puts format("trace: %s (window: %.3f %.3f)", path, from, to)
    puts PostgresBench::RailsTrace.report(PostgresBench::RailsTrace.load(path), from, to, wrk)
  end
end
