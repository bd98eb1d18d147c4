# frozen_string_literal: true

module Weft
  class Pool
    # An in-flight limit that follows what the resources reach (Weft::Pool's `adaptive:`): how
    # many holders may hold a resource at once, between a floor and the pool's `limit`. Made
    # for resources that stand for requests to a service (the HTTP client's connections), whose
    # holds are that service's latency.
    #
    # A service that is at its capacity queues what it gets beyond it: its latency then grows
    # in proportion to the requests in flight (Little's law), and a holder added adds only
    # wait, there, where a caller that has given up still costs a request. So the limit keeps
    # the mean latency within TOLERANCE times the baseline, the fastest hold seen: a request
    # that met no queue. Each round of holds (at least ROUND) it takes their mean latency and
    # the mean of the holders in flight each found when it began, itself included (a queue
    # served first come first served puts those ahead of it), and moves to the in-flight count at which,
    # at the same rate of returns, the latency would be the allowed one (in flight x allowed /
    # latency): down when the latency is above it (by half at most per round), up when below,
    # by twice at most per round and only when the holders reached the limit (a limit nobody
    # reaches says nothing about it). A round moves it only if all its holds began after it
    # last moved: they answer for that limit. It starts at the pool's limit: a burst to a new
    # service is not held back before there is anything to go by.
    #
    # A service whose latencies vary (a mix of requests, a slow query of its own now and then)
    # also has a mean far above its fastest hold, and one that got slower on its own has a
    # latency above its old baseline; neither is queueing, and neither latency falls when the
    # in-flight count does. So a cut (of SMALLEST_CUT at least) is an experiment: the first
    # round of holds that all began after it, with at least half the cut taken, checks that the
    # latency fell by at least a quarter as much as the holders in flight did (by Little's law
    # a queue's would fall as much, but the round that cut may have been the start of a burst,
    # when the queue was still filling). If it did not, the latency is the service's own, or so
    # says this experiment: the limit goes back to what it was before the cut. Two such
    # verdicts in a row (a round that cut at the start of a burst can make one wrongly: its
    # latency is low for its in-flight count) and from then on the baseline is the lowest round
    # mean (starting with that round's), not the fastest hold, until an experiment finds
    # queueing again.
    #
    # Holds that were discarded (the HTTP client's: a deadline or an error mid-request) are
    # lower bounds: a caller that gave up at its deadline says the answer took at least that
    # long, whatever the in-flight count. They count in a round's latency (without them a
    # service so far behind that every caller gives up would show no latency at all), but a
    # round of which more than a quarter were discarded only ever lowers the limit: it does not
    # raise it (its latency is too low), and it ends an experiment, the cut standing. Callers
    # giving up at that rate are reason enough to send fewer, and the requests they gave up on
    # are still in the service's queue (a server seldom notices a client gone before it
    # answers), where they keep its latency up after the in-flight count fell: a check then
    # would take queueing for the service's own slowness. (The fastest hold is always one that
    # was returned: a reset in a millisecond is not a fast answer.)
    #
    # Not thread-safe: the pool calls it under its lock. Floats only, nothing allocated per
    # sample.
    class AdaptiveLimit
      # Holds per round at least: enough that one slow hold does not move the limit, few enough
      # that the limit follows within a few dozen returns. A round lasts as many holds as were
      # in flight when one of them began, if more: holds that began together end in the
      # order of their latencies, and a round of the first few to end would be a round of the
      # fastest (16 of a burst of 64 against a service taking 30-90 ms: 41 ms against 60-77).
      ROUND = 16
      # The mean latency allowed, as a multiple of the baseline: room for a service's own
      # spread of latencies (a mean up to three times its fastest answer needs no experiment),
      # and at a saturated one a queue of about twice as many requests as it serves at once
      # (the limit settles near three times that many).
      TOLERANCE = 3.0
      # The most a round lowers the limit: to this share of the holders it saw in flight.
      LARGEST_CUT = 0.5
      # The least a cut lowers the limit: to this share of the holders in flight. Smaller cuts
      # would change the latency less than a round's noise does, and could not be checked (see
      # the class comment).
      SMALLEST_CUT = 0.75
      # An experiment's verdict, by how much the latency moved for the change in holders in
      # flight ((latency / before - 1) / (in flight / before - 1), 1 for a queue, 0 for a
      # latency of the service's own): queueing at QUEUE_ELASTICITY or more, the service's own
      # at OWN_ELASTICITY or less; in between, the next round decides. An experiment lasts
      # TRIAL_ROUNDS rounds at most.
      QUEUE_ELASTICITY = 0.5
      OWN_ELASTICITY = 0.25
      TRIAL_ROUNDS = 8
      # Rounds at the floor that ask for a lower limit, after which the limit is raised to twice
      # the floor as an experiment: cuts cannot be tried there, and a service whose latency is
      # its own would otherwise stay at the floor for good.
      FLOOR_ROUNDS = 32

      # @return [Integer] holders allowed at once
      attr_reader :limit
      # @return [Float, nil] seconds: the fastest hold, or after a failed experiment the lowest
      #   round mean since (nil before the first round)
      attr_reader :baseline
      # @return [Float, nil] seconds: the last round's mean latency (nil before the first)
      attr_reader :latency

      # @param floor [Integer] the lowest the limit goes
      # @param ceiling [Integer] the highest (the pool's limit), and where it starts
      def initialize(floor:, ceiling:)
        @floor = floor
        @ceiling = ceiling
        @limit = ceiling
        @value = ceiling.to_f # the limit before rounding down
        @baseline = @latency = nil
        # Verdicts in a row that the latency's spread is the service's own (#check_cut), and
        # whether the baseline is therefore the lowest round mean.
        @own_latency_verdicts = 0
        @spread = false
        # The round so far: seconds held, holders in flight during them, the most in flight
        # during one, the fastest (returned) hold, when the first began, holds, discarded ones.
        @held = @in_flight = @crowd = 0.0
        @fastest = @began = Float::INFINITY
        @holds = @discarded = 0
        # The experiment under way, if any: the latency and holders in flight of the round that
        # changed the limit, the limit before, when, the in-flight count it waits for (halfway
        # to the change in the limit, in proportion), and the rounds it may still take.
        @trial_latency = @trial_in_flight = @trial_from = @trial_at = @trial_checked_at = nil
        @trial_rounds = 0
        @trial_raised = false # whether it raised the limit (a probe) rather than cut it
        @floor_rounds = 0 # rounds in a row at the floor that asked for less
        @changed_at = -Float::INFINITY # when the limit last moved
      end

      # Records one hold that ended.
      # @param began [Float] when it was checked out (Timers.now)
      # @param ended [Float] when it came back
      # @param in_flight [Integer] holders in flight when it began, itself included
      # @param discarded [Boolean] whether it ended in a discard (see the class comment)
      # @return [Integer] how much the limit rose (as many more holders may go now)
      def sample(began, ended, in_flight, discarded)
        held = ended - began
        @held += held
        @in_flight += in_flight
        @crowd = in_flight if in_flight > @crowd
        @began = began if began < @began
        if discarded
          @discarded += 1
        elsif held < @fastest
          @fastest = held
        end
        return 0 if (@holds += 1) < ROUND || @holds < @crowd

        before = @limit
        update(@held / @holds, @in_flight / @holds, @discarded > @holds / 4, ended) if @held.positive?
        @changed_at = ended if @limit != before
        @held = @in_flight = @crowd = 0.0
        @fastest = @began = Float::INFINITY
        @holds = @discarded = 0
        @limit > before ? @limit - before : 0
      end

      private

      # At the end of a round: its mean latency, mean holders in flight, whether more than a
      # quarter of it was discarded, and the time.
      def update(latency, in_flight, censored, now)
        @latency = latency
        # The fastest answer is one, censored round or not; a censored round's mean is too low.
        best = @spread ? (censored ? Float::INFINITY : latency) : @fastest
        @baseline = best if best.finite? && (@baseline.nil? || best < @baseline)
        return unless @baseline # no answer yet, every hold discarded

        if censored
          end_experiment
        elsif @trial_at
          # An experiment holds the limit where it put it until its verdict: the round that
          # gives one has been spent on it.
          return check_trial(latency, in_flight) if @began >= @trial_at && taken?(in_flight)
          return unless (@trial_rounds -= 1) <= 0

          end_experiment # the holders in flight never changed enough: demand fell, or rose
        end
        @floor_rounds = 0 unless @value == @floor
        return if @began < @changed_at # some of its holds began under another limit

        allowed = @baseline * TOLERANCE
        target = in_flight * allowed / latency
        if latency > allowed
          lower = target.clamp(in_flight * LARGEST_CUT, in_flight * SMALLEST_CUT)
          cut(latency, in_flight, [lower, @floor].max, censored, now)
          return probe(latency, in_flight, now) if @value == @floor && !censored && !@trial_at
        elsif !censored && @crowd >= @limit && target > @value
          self.value = [target, @value * 2].min
        end
      end

      def cut(latency, in_flight, lower, censored, now)
        return if lower >= @value # at the floor already, or the cut has been made
        from = @value
        self.value = lower
        # One experiment at a time, not on a censored round, and not on a cut the floor made
        # too small to tell queueing from noise.
        return if @trial_at || censored || @value > in_flight * SMALLEST_CUT

        start_trial(latency, in_flight, from, now)
      end

      # At the floor, a round that asks for less: after FLOOR_ROUNDS of them, twice the floor,
      # checked as a cut is.
      def probe(latency, in_flight, now)
        return if (@floor_rounds += 1) < FLOOR_ROUNDS
        @floor_rounds = 0
        self.value = @floor * 2
        start_trial(latency, in_flight, @floor, now) if @value >= @floor / SMALLEST_CUT # else the ceiling is near
      end

      def start_trial(latency, in_flight, from, now)
        @trial_raised = @value > from
        @trial_latency, @trial_in_flight, @trial_from, @trial_at = latency, in_flight, from, now
        @trial_checked_at = in_flight * (1.0 + (@value / from)) / 2
        @trial_rounds = TRIAL_ROUNDS
      end

      # Whether a round has at least half the experiment's change of holders in flight.
      def taken?(in_flight)
        @trial_raised ? in_flight >= @trial_checked_at : in_flight <= @trial_checked_at
      end

      # The experiment's verdict (see QUEUE_ELASTICITY): queueing keeps a cut and undoes a
      # probe; the service's own latency undoes a cut and keeps a probe, and two such verdicts
      # in a row make the baseline the lowest round mean; neither waits for the next round.
      def check_trial(latency, in_flight)
        elasticity = ((latency / @trial_latency) - 1.0) / ((in_flight / @trial_in_flight) - 1.0)
        if elasticity >= QUEUE_ELASTICITY
          @own_latency_verdicts = 0
          self.value = @trial_from if @trial_raised
          if @spread
            @spread = false
            @baseline = @fastest
          end
        elsif elasticity <= OWN_ELASTICITY
          self.value = @trial_from unless @trial_raised
          if (@own_latency_verdicts += 1) >= 2
            @spread = true
            @baseline = latency
          end
        elsif (@trial_rounds -= 1).positive?
          return # the next round decides
        end
        end_experiment
      end

      def end_experiment
        @trial_latency = @trial_in_flight = @trial_from = @trial_at = @trial_checked_at = nil
      end

      def value=(value)
        @value = value.clamp(@floor.to_f, @ceiling.to_f)
        @limit = @value.floor
      end
    end
  end
end
