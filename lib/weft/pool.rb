# frozen_string_literal: true

require_relative "errors"
require_relative "timers"
require_relative "deadline"
require_relative "renamed_options"
require_relative "fork_handler"
require_relative "pool/adaptive_limit"

module Weft
  # A bounded pool of reusable resources (connections, sessions, workers) handed out one holder
  # at a time. Core: any component may build on it (the HTTP client keeps one per origin).
  #
  #   pool = Weft::Pool.new(limit: 10, acquire_timeout: 5, idle_timeout: 30) { TCPSocket.new(host, port) }
  #   pool.with { |socket| socket.write(ping) }
  #
  # * Exclusive checkout, at most `limit` resources alive at once; callers beyond that wait up
  #   to `acquire_timeout` seconds and then get Weft::Pool::TimeoutError.
  # * Resources are created lazily, outside the pool's lock (so a slow connect does not hold
  #   up other callers), and reused most-recently-used first, so surplus ones go idle and
  #   expire after `idle_timeout`.
  # * Growth rule (with `max_creating`): once the pool holds `max_creating` resources, a
  #   checkout that finds none idle creates one only when waiting for a busy one to come back
  #   is expected to take longer. The pool keeps a running median of how long a resource is
  #   held (checkout to checkin) and a running average of how long a creation takes. With B
  #   resources busy and W checkouts already waiting, the k-th in line waits about k holds
  #   spread over the B, so the line's average wait is (W + 2) / 2 x hold / B; the checkout
  #   creates when that exceeds a creation. It creates without asking when nothing is busy,
  #   before the first checkin and creation (no figures yet), and while nothing has come back
  #   since a creation ended or since a waiter began to wait a creation's time (the figures
  #   are stale: holders now keep theirs longer). So a pool whose resources come back in
  #   microseconds does not open more for every burst, and one whose holders keep them longer
  #   than a creation takes grows at once. A checkout never times out while the pool may
  #   grow: when its `acquire_timeout` is up, it creates. The line's wait does not count when
  #   the line waits for this process's CPU rather than for resources: when resources handed
  #   to waiters lie idle, until the waiter runs, for more than an eighth of their cycle (a
  #   running median), one more would wait the same way (the cases that create without
  #   asking still do). Without `max_creating` (nil: the limit) a checkout below the limit
  #   creates at once, as a plain pool does.
  # * Adaptive in-flight limit (`adaptive: true`): holders at once, at most, follow the
  #   latency of the holds, between `max_creating` and `limit` (Weft::Pool::AdaptiveLimit): for
  #   resources that stand for requests to a service, so that a service at its capacity gets
  #   about three times as many as it serves at once (its queue within twice its fastest
  #   answer), and the rest wait here, where a caller that gives up costs the service nothing.
  # * A resource is retired after `max_uses` checkouts or `max_age` seconds (each resource
  #   draws its own point within the last tenth of either, see LIMIT_SPREAD), when a holder
  #   reports it broken (#discard, or an exception escaping #with), or when the optional
  #   `check` callback rejects it at checkout.
  # * Fork safety: a child process never receives its parent's resources (sockets shared
  #   across processes interleave their bytes); it starts with an empty pool and leaves the
  #   inherited ones for the parent to close. A fork is noticed by Weft::ForkHandler.generation,
  #   not Process.pid: that is a system call (glibc no longer caches the pid), and checkout and
  #   checkin ask on every use.
  #
  # Waiting uses Thread::Mutex and Thread::ConditionVariable, which Ruby routes through the
  # fiber scheduler: one pool serves tasks inside a reactor and plain threads alike.
  #
  # The option names (`limit`, `acquire_timeout`, `max_age`, `max_uses`) are shared by every
  # pool in Weft: the HTTP client's and Weft::Postgres::Pool use them for the same ideas.
  class Pool
    # Raised when no resource became free within the acquire timeout.
    class TimeoutError < Weft::TimeoutError; end

    # Raised by #checkout on a pool that was closed.
    class ClosedError < StandardError
      include Weft::Error
    end

    # Bookkeeping for one live resource: taken_at is when its current holder checked it out,
    # held how long its last holder kept it (#sample_idle_share); limit_factor scales max_uses
    # and max_age for this resource (#spread_factor); in_flight how many were busy, itself
    # included, when its current holder took it (the adaptive limit's figure: the holders a
    # queue behind the resources would have put ahead of it, and itself).
    Entry = Struct.new(:resource, :created_at, :used_at, :uses, :taken_at, :limit_factor, :held, :in_flight)

    # The share of `max_uses` and `max_age` over which resources' retirements are spread: each
    # resource retires at its own point between 90% and 100% of the limit. Resources created
    # together (a burst, a boot) and used alike would otherwise reach the limit together and be
    # replaced in one wave: the HTTP client's busiest connections, which LIFO reuse keeps
    # equally busy, all reconnecting within the same few requests, or every PostgreSQL
    # connection opened at boot closing in the same second.
    LIMIT_SPREAD = 0.1

    # @return [Float] a factor between 1 - LIMIT_SPREAD and 1, drawn afresh for each resource
    def self.spread_factor
      1.0 - (rand * LIMIT_SPREAD)
    end
    # The running median of holds moves by this factor per checkin, up after a longer hold and
    # down after a shorter one. A median, not a mean: in a burst the first holders keep their
    # resources while the burst is being started (tens of ms) and the rest for microseconds,
    # and a mean of the two says neither. Per checkin it settles within about 6%, and it
    # follows a change of 10x in about 40 checkins.
    HOLD_STEP = 1.0625
    # The running median of idle shares (see #grow?) moves by this much per hand-off: from
    # none to IDLE_SHARE_LIMIT in 8 hand-offs.
    IDLE_SHARE_STEP = 1.0 / 64
    # While a resource handed to a waiter lies idle for more than this share of its cycle (the
    # running median), the waiters wait for this process's CPU, not for resources: the pool
    # does not grow (see #grow?).
    IDLE_SHARE_LIMIT = 0.125
    # Weight of the newest creation in the average of creation times (creations are few).
    CREATE_WEIGHT = 0.25
    NONE = [].freeze
    # Options of .new that were renamed: old name => new name (see Weft::RenamedOptions).
    RENAMED_OPTIONS = { timeout: :acquire_timeout }.freeze
    private_constant :Entry, :NONE, :HOLD_STEP, :IDLE_SHARE_STEP, :IDLE_SHARE_LIMIT, :CREATE_WEIGHT

    # Accepts the old names of renamed options (RENAMED_OPTIONS), with a deprecation warning.
    # @see #initialize
    def self.new(**options, &create)
      super(**RenamedOptions.rename("Weft::Pool.new", options, RENAMED_OPTIONS), &create)
    end

    # @return [Integer] the most resources alive at once
    attr_reader :limit
    # @return [Integer] the most holders at once: `limit`, or less with `adaptive: true`
    attr_reader :in_flight_limit

    # @param limit [Integer] the most resources alive at once
    # @param acquire_timeout [Numeric, nil] default seconds #checkout waits for a free resource
    #   (nil: forever); `timeout:` is its deprecated old name
    # @param idle_timeout [Numeric, nil] retire a resource unused for this long
    # @param max_uses [Integer, nil] retire a resource after this many checkouts, at most
    #   (LIMIT_SPREAD)
    # @param max_age [Numeric, nil] retire a resource this many seconds after its creation, at
    #   most (LIMIT_SPREAD)
    # @param check [#call, nil] called with an idle resource before it is handed out; a falsy
    #   answer retires it (e.g. a socket the peer has closed)
    # @param close [#call, nil] called with each resource the pool retires
    # @param max_creating [Integer, nil] resources being created at once, at most (nil: up to
    #   `limit`); a checkout beyond it waits for a resource to come back or a creation to end.
    #   Given, it also turns the growth rule on (above): past `max_creating` resources, the
    #   pool creates only when waiting for a return is expected to be slower
    # @param adaptive [Boolean] let the holders at once, at most, follow the latency of the
    #   holds, between `max_creating` and `limit` (see the class comment; needs `max_creating`
    #   below `limit` to have room)
    # @yieldparam args what the caller passed to #checkout / #with
    # @yieldreturn a new resource, created when the pool needs one
    def initialize(limit:, acquire_timeout: nil, idle_timeout: nil, max_uses: nil, max_age: nil, check: nil,
                   close: nil, max_creating: nil, adaptive: false, &create)
      raise ArgumentError, "Weft::Pool.new needs a block that creates a resource" unless create
      raise ArgumentError, "limit must be a positive Integer" unless limit.is_a?(Integer) && limit.positive?
      unless max_creating.nil? || (max_creating.is_a?(Integer) && max_creating.positive?)
        raise ArgumentError, "max_creating must be a positive Integer or nil"
      end
      @limit = limit
      @max_creating = max_creating || limit
      @acquire_timeout = acquire_timeout
      @idle_timeout = idle_timeout
      @max_uses = max_uses
      @max_age = max_age
      @check = check
      @close = close
      @create = create
      # The growth rule's figures, kept across a fork (see #reset_state): the running median of
      # holds (#sample_hold) and the running average of creations in seconds, and the running
      # median of idle shares (#sample_idle_share).
      @hold_time = @create_time = nil
      @idle_share = 0.0
      # Kept across a fork too: it describes what the resources reach.
      @adaptive = adaptive ? AdaptiveLimit.new(floor: @max_creating, ceiling: limit) : nil
      @in_flight_limit = limit
      reset_state
    end

    # Runs the block with a checked-out resource and checks it back in afterwards. If the block
    # raises, the resource is retired instead: its state is unknown (a half-written request, a
    # transaction left open).
    # @param args passed to the create block if a new resource is needed
    # @param acquire_timeout [Numeric, nil] seconds to wait for a free resource (defaults to the
    #   pool's)
    # @param timeout deprecated old name of acquire_timeout (see #checkout)
    # @return the block's value
    def with(*args, acquire_timeout: @acquire_timeout, timeout: false)
      acquire_timeout = renamed_timeout(acquire_timeout, timeout) unless timeout == false
      resource = checkout(*args, acquire_timeout: acquire_timeout)
      begin
        value = yield resource
      rescue Exception # rubocop:disable Lint/RescueException
        discard(resource)
        raise
      end
      checkin(resource)
      value
    end

    # Takes a resource for the caller's exclusive use, creating one if none is idle and the
    # limit allows, or waiting for one to be returned.
    # @param args passed to the create block if a new resource is needed (e.g. the caller's
    #   deadline for opening a connection)
    # @param acquire_timeout [Numeric, nil] seconds to wait at most (defaults to the pool's)
    # @param timeout deprecated old name of acquire_timeout; false (never a timeout) stands for
    #   "not given". A keyword with a literal default rather than a Hash of options: checkout is
    #   on every request's path, and both cost there.
    # @return the resource; hand it back with #checkin or #discard
    # @raise [TimeoutError] when none became free in time
    # @raise [ClosedError] when the pool was closed
    def checkout(*args, acquire_timeout: @acquire_timeout, timeout: false)
      acquire_timeout = renamed_timeout(acquire_timeout, timeout) unless timeout == false
      # The time limit starts now, but its Deadline is made only by a checkout that has to wait.
      started = acquire_timeout && Timers.now
      Deadline.validate(acquire_timeout) if started
      # A loop, not Kernel#loop: a return from inside a block is a throw that unwinds the
      # block's frame, and this runs on every checkout.
      while true # rubocop:disable Style/InfiniteLoop
        entry, retired, returns = take_or_reserve(started, acquire_timeout)
        close_retired(retired, entry) unless retired.empty?
        return entry.resource if entry && usable?(entry)
        next if entry # the check rejected it: try again

        return create_resource(args, returns)
      end
    end

    # Returns a resource to the pool for the next holder (or retires it if it is due).
    # @param resource [Object] what #checkout returned
    # @return [nil]
    def checkin(resource)
      return forget_parent_resources if ForkHandler.generation != @generation
      retire = false
      @mutex.synchronize do
        entry = @busy.delete(resource)
        raise UsageError, "checkin of a resource that is not checked out from this pool" unless entry
        now = Timers.now
        entry.used_at = now
        sample_hold(entry.held = now - entry.taken_at)
        if @closed || worn_out?(entry, now)
          retire = true
          @size -= 1
        else
          @idle.push(entry)
          @returns += 1
          @growing = false # waiters are being served by returns (see #take_or_reserve)
        end
        @available.signal unless @adaptive && sample_latency(entry, now, false)
      end
      close_resource(resource) if retire
      nil
    end

    # Retires a checked-out resource that is broken or in an unknown state; its slot becomes
    # free at once. Discarding a resource this pool does not hold (again) does nothing.
    # @param resource [Object] what #checkout returned
    # @return [nil]
    def discard(resource)
      retire_broken(resource, true)
    end

    # Retires idle resources past their idle timeout or age. Checkout and checkin prune too;
    # call this from a periodic task to close idle resources of a pool nobody is using.
    # @return [Integer] how many were retired
    def prune
      retired = @mutex.synchronize { take_expired(Timers.now) }
      retired.each { |resource| close_resource(resource) }
      retired.size
    end

    # Retires every idle resource; the pool stays usable and creates new ones on demand.
    # @return [Integer] how many were retired
    def clear
      retired = @mutex.synchronize do
        idle = @idle.map(&:resource)
        @size -= idle.size
        @idle.clear
        @available.broadcast
        idle
      end
      retired.each { |resource| close_resource(resource) }
      retired.size
    end

    # Retires every idle resource and makes later checkouts fail; resources still checked out
    # are retired when they come back.
    # @return [nil]
    def close
      @mutex.synchronize { @closed = true }
      clear
      nil
    end

    # @return [Boolean]
    def closed?
      @closed
    end

    # Counters for statistics pages and tests.
    # @return [Hash] size (alive), idle, busy, waiting, limit, in_flight_limit, created,
    #   retired, discarded (retired because broken), checkouts, timeouts (checkouts that gave
    #   up), the growth rule's figures: hold_time (running median) and create_time (running
    #   average) in seconds, nil before the first checkin / creation, and idle_share (running
    #   median of the share of a resource's cycle it lay idle handed to a waiter, 0.0 before the
    #   first); and with `adaptive: true` the adaptive limit's: latency (the last round's mean
    #   hold) and baseline_latency (the lowest), seconds, nil before the first round
    def statistics
      @mutex.synchronize do
        stats = {
          size: @size, idle: @idle.size, busy: @busy.size, waiting: @waiting, limit: @limit,
          in_flight_limit: @in_flight_limit, created: @created, retired: @retired, discarded: @discarded,
          checkouts: @checkouts, timeouts: @timeouts, hold_time: @hold_time, idle_share: @idle_share,
          create_time: @create_time
        }
        stats.update(latency: @adaptive.latency, baseline_latency: @adaptive.baseline) if @adaptive
        stats
      end
    end

    private

    # The per-call timeout given under its old name `timeout:`. Both names given is an error; it
    # shows as an acquire_timeout other than the pool's default (a keyword cannot tell "given"
    # from "defaulted" without a Hash per call).
    def renamed_timeout(acquire_timeout, timeout)
      unless acquire_timeout.equal?(@acquire_timeout)
        raise ArgumentError, "Weft::Pool#checkout: give acquire_timeout: or its old name timeout:, not both"
      end
      RenamedOptions.warn_once("Weft::Pool#checkout", :timeout, :acquire_timeout)
      timeout
    end

    # Also the state of a forked child (#forget_parent_resources). The growth rule's figures are
    # not reset: they describe the holders and what the resources connect to, not the inherited
    # resources, and hold for the child as for the parent (a child of a prefork server does not
    # start by opening a batch per burst).
    def reset_state
      @generation = ForkHandler.generation
      @mutex = Thread::Mutex.new
      @available = Thread::ConditionVariable.new
      @idle = [] # Entries, most recently used last
      @busy = {}.compare_by_identity # resource => Entry
      @size = 0 # idle + busy + being created
      @creating = 0
      @returns = 0 # resources checked back in, ever (see #create_resource)
      @waiting = 0
      @growing = false # nothing came back while a resource was created or a waiter watched
      @watched = false # a waiter is watching for returns (see #take_or_reserve)
      @closed = false
      @created = @retired = @discarded = @checkouts = @timeouts = 0
    end

    # Under the lock: pops an idle entry (marking it busy) or reserves a slot for a new
    # resource (returning nil), waiting while neither is possible or the growth rule (#grow?)
    # says a resource will come back sooner than one can be created.
    #
    # A checkout that waits although it could create trusts the figures, which can be stale
    # (an origin that has just slowed down). So one such waiter at a time watches (a timed
    # wait of one creation time; one, so that a burst of waiters is not woken once each): if
    # nothing came back meanwhile, the pool grows on (@growing) until something does. The
    # others wait for a wake-up (or their acquire_timeout), so a watcher that leaves the line
    # other than to create (a return served it, it was cancelled) wakes one of them to take the
    # watch up (#hand_on_watch): otherwise, if nothing came back after that, they would wait
    # while the pool could grow. Its time up, a checkout that may create does so rather than
    # raise TimeoutError.
    # @param started [Float, nil] when the checkout began (Timers.now), if it has a timeout
    # @param timeout [Numeric, nil] seconds it may wait in all
    # @return [Array(Entry or nil, Array, Integer)] the entry, expired resources to close, and
    #   how many resources had come back so far (see #create_resource)
    def take_or_reserve(started, timeout)
      forget_parent_resources if ForkHandler.generation != @generation
      @mutex.synchronize do
        raise ClosedError, "the pool is closed" if @closed
        now = Timers.now
        retired = take_expired(now)
        deadline = nil
        watched = false # whether this checkout watched at some point
        begin
          # Admitted below the in-flight limit only (below `limit` it is the adaptive one).
          until ((admitted = @busy.size + @creating < @in_flight_limit) && (entry = @idle.pop)) ||
                ((can_create = admitted && @size < @limit && @creating < @max_creating) && grow?)
            deadline ||= started && Deadline.new(started + timeout, timeout)
            wait = deadline&.remaining
            if wait && wait <= 0
              break if can_create # time is up, but the pool may grow: no TimeoutError below the limit

              @timeouts += 1
              raise TimeoutError, "no resource free in the pool within #{timeout}s (#{limit_description})"
            end
            if can_create && !@watched
              watching = watched = @watched = true
              returns = @returns
              since = Timers.now
              wait = @create_time if wait.nil? || @create_time < wait
            end
            @waiting += 1
            begin
              @available.wait(@mutex, wait)
            ensure
              @waiting -= 1
              if watching
                watching = @watched = false
                # Nothing came back for as long as a creation takes: the figures are stale.
                @growing = true if @returns == returns && Timers.now - since >= @create_time
              end
            end
            raise ClosedError, "the pool is closed" if @closed
            now = nil
          end
        rescue Exception # rubocop:disable Lint/RescueException
          hand_on_watch if watched # timed out at the limit, cancelled, the pool closed
          raise
        end
        hand_on_watch if watched && entry # served by a return
        @checkouts += 1
        if entry
          if now
            entry.taken_at = now
          else
            # It waited, and was served by a resource that came back meanwhile: the resource
            # lay idle from its checkin until this checkout ran. Counted while the line is as
            # long as the resources are many, where growth is decided (see #grow?): in a
            # burst's last hand-offs the CPU frees up, and they would say so to the next burst.
            entry.taken_at = now = Timers.now
            sample_idle_share(now - entry.used_at, entry.held) if @waiting >= @busy.size
          end
          entry.uses += 1
          @busy[entry.resource] = entry
          entry.in_flight = @busy.size
        else
          @size += 1
          @creating += 1
        end
        [entry, retired, @returns]
      end
    end

    # Under the lock: a watcher is leaving the line without creating (#take_or_reserve); one
    # of the waiters left takes the watch up, unless one watches already.
    def hand_on_watch
      @available.signal if !@watched && @waiting.positive?
    end

    # Under the lock, when no resource is idle and one may be created: whether to create one
    # rather than wait for one to come back. Yes below `max_creating` resources (so always
    # without it: the rule is off), when nothing is busy (nothing would come back), before
    # the first checkin and the first creation (no figures yet), while nothing comes back
    # (@growing), and otherwise when the average wait of the line, this checkout included, is
    # longer than a creation: the k-th of the W + 1 in line waits about k holds spread over
    # the busy resources, (W + 2) / 2 x hold / busy on average; unless returned resources lie
    # idle for more than IDLE_SHARE_LIMIT of their cycle before the waiter woken for them runs.
    #
    # That wait says how long the line is, not that resources are what it lacks. When the
    # line waits for this process's CPU (a client parsing answers that an upstream sends at
    # once), a resource that comes back lies idle until its waiter gets the CPU, and one more
    # resource would wait for the CPU the same way: every resource added stretches every
    # hold (more holders per reactor turn), so the wait grows with the pool, and the rule grew
    # it from 16 to 150-220 connections in 30 rounds of 1,000 requests at limit 1,000 (a probe
    # on 3.3 + YJIT; profile.rb: 4-12 opened per round). The idle share tells the two apart:
    # against an origin that answers in milliseconds a waiter runs microseconds after its
    # resource comes back (0.0 with holds of 5 ms); when the CPU is the queue it runs a reactor
    # turn later, about what a hold lasts (0.15-0.5 in that probe). It does not see an upstream that is itself
    # saturated: its holds stretch with the connections too, while this process idles.
    #
    # The average wait, not the last one's (W + 1 holds): when this process's CPU is what
    # everyone waits for, holds and creations both stretch with that queue, the last
    # waiter's wait and a creation come out nearly equal, and the rule grew the pool by
    # chance (7-8 connections a round at limit 1,000, vs 12-15 with no rule; see
    # bench/results/http_client-ruby-3.3.md). A floor of `max_creating`: figures from quick
    # holds would shrink the pool to a resource or two, which costs the waiters more than the
    # figures see (a wait and a wake-up each: 14,200-16,800 req/s with 2 connections vs
    # 19,800-27,400 with 16 on 3.3, same page). Integer and Float arithmetic only: nothing is
    # allocated.
    def grow?
      busy = @busy.size
      return true if @size < @max_creating || busy.zero? || @growing || @hold_time.nil? || @create_time.nil?
      return false if @idle_share > IDLE_SHARE_LIMIT
      (@waiting + 2) * @hold_time > 2 * busy * @create_time
    end

    # Under the lock: gives the adaptive limit a hold that ended (returned or discarded), and
    # when the limit rose, wakes as many waiters more as it rose by: they may go now. (Not all
    # of them: a burst can have a thousand waiting.)
    # @return [Boolean] whether it woke any (else the caller wakes one, for the resource)
    def sample_latency(entry, now, discarded)
      rose = @adaptive.sample(entry.taken_at, now, entry.in_flight, discarded)
      @in_flight_limit = @adaptive.limit
      return false if rose.zero?
      [rose + 1, @waiting].min.times { @available.signal }
      true
    end

    # #discard; `sample` says whether its hold was one (not a checkout's own check rejecting an
    # idle resource, see #usable?).
    def retire_broken(resource, sample)
      return forget_parent_resources if ForkHandler.generation != @generation
      held = @mutex.synchronize do
        next false unless (entry = @busy.delete(resource))
        @size -= 1
        @discarded += 1
        @available.signal unless sample && @adaptive && sample_latency(entry, Timers.now, true)
        true
      end
      close_resource(resource) if held
      nil
    end

    # For the TimeoutError's message.
    def limit_description
      @in_flight_limit < @limit ? "limit #{@limit}, #{@in_flight_limit} at once (adaptive)" : "limit #{@limit}"
    end

    # Under the lock: moves the running median of the share of a resource's cycle (its last
    # hold and the hand-off after it) that it lay idle, handed to a waiter not yet running.
    def sample_idle_share(idle, held)
      cycle = idle + held
      return unless cycle.positive? # both within the clock's resolution: says nothing
      share = idle / cycle
      if share > @idle_share
        @idle_share += IDLE_SHARE_STEP
      elsif share < @idle_share
        @idle_share -= IDLE_SHARE_STEP
      end
    end

    # Under the lock: moves the running median of holds (see HOLD_STEP) after a hold of `held`
    # seconds.
    def sample_hold(held)
      hold = @hold_time
      @hold_time =
        if hold.nil? then held
        elsif held > hold then hold * HOLD_STEP
        elsif held < hold then hold / HOLD_STEP
        else hold
        end
    end

    # Closes the resources a checkout found expired (#take_or_reserve), outside the lock. The
    # checkout holds its entry or creation slot by then: if a close is interrupted (a close
    # that waits on its socket, and the task is cancelled there), the reservation goes back
    # before the error goes on. Kept, it was lost for good: the slot counted as a resource
    # being created, and at the limit every later checkout timed out.
    def close_retired(retired, entry)
      retired.each { |stale| close_resource(stale) }
    rescue Exception # rubocop:disable Lint/RescueException
      entry ? checkin(entry.resource) : free_creation_slot
      raise
    end

    # Runs the check outside the lock; a rejected entry is retired, and so is one whose check
    # was interrupted (its state is unknown, and the checkout's reservation must go back).
    def usable?(entry)
      return true unless @check
      ok = begin
        @check.call(entry.resource)
      rescue StandardError
        false
      rescue Exception # rubocop:disable Lint/RescueException
        retire_broken(entry.resource, false)
        raise
      end
      retire_broken(entry.resource, false) unless ok
      ok
    end

    # @param returns [Integer] resources that had come back (#checkin) when the slot was reserved
    def create_resource(args, returns)
      started = Timers.now
      resource = @create.call(*args)
    rescue Exception # rubocop:disable Lint/RescueException
      free_creation_slot
      raise
    else
      now = Timers.now
      @mutex.synchronize do
        @created += 1
        @busy[resource] = Entry.new(resource, now, now, 1, now, Pool.spread_factor, nil, @busy.size + 1)
        @creating -= 1
        took = now - started
        @create_time = @create_time ? @create_time + (took - @create_time) * CREATE_WEIGHT : took
        # A creation slot is free: a waiting checkout is woken to look again. When nothing came
        # back while this one was made, holders keep theirs longer than making one takes,
        # whatever the figures say: the pool grows on (#grow?) and the woken one makes the
        # next. When some came back, the waiters they woke took them, and the growth rule
        # decides for the one woken now. It is woken all the same: a checkout that began to wait
        # while max_creating were being created is not watching (#take_or_reserve), and if no
        # return came it would wait until its acquire_timeout (or for good) while the pool could
        # grow. (Without the cap, checkouts wait only at the limit, for resources.)
        if @max_creating < @limit && @waiting.positive?
          @growing = true if @returns == returns
          @available.signal
        end
      end
      resource
    end

    # Gives back the slot of a creation that failed or never began.
    def free_creation_slot
      @mutex.synchronize do
        @size -= 1
        @creating -= 1
        @available.signal
      end
    end

    # Under the lock: removes idle entries past their idle timeout or age.
    def take_expired(now)
      return NONE if @idle.empty? || (@idle_timeout.nil? && @max_age.nil?)
      # @idle is ordered by last use, so without max_age only the oldest needs a look.
      return NONE if @max_age.nil? && now - @idle.first.used_at < @idle_timeout
      expired, @idle = @idle.partition { |entry| expired?(entry, now) }
      @size -= expired.size
      @available.broadcast unless expired.empty?
      expired.map(&:resource)
    end

    def expired?(entry, now)
      (@idle_timeout && now - entry.used_at >= @idle_timeout) || too_old?(entry, now)
    end

    def worn_out?(entry, now)
      (@max_uses && entry.uses >= @max_uses * entry.limit_factor) || too_old?(entry, now)
    end

    def too_old?(entry, now)
      @max_age && now - entry.created_at >= @max_age * entry.limit_factor
    end

    def close_resource(resource)
      @mutex.synchronize { @retired += 1 }
      @close&.call(resource)
    rescue StandardError => e
      Weft.logger.warn("Weft::Pool: closing a resource failed: #{e.class}: #{e.message}") if defined?(Weft.logger)
    end

    # In a forked child the inherited resources belong to the parent (a socket shared by two
    # processes interleaves their bytes), so the child forgets them without closing them.
    def forget_parent_resources
      reset_state
      nil
    end
  end
end
