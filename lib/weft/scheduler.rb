# frozen_string_literal: true

require "io/event"
require "fcntl"
require "socket"
require_relative "errors"
require_relative "timers"
require_relative "task"
require_relative "fiber_control"
require_relative "fork_handler"
require_relative "selector_io"
require_relative "io_close_notice"

module Weft
  # Weft's Fiber::Scheduler: the reactor behind Weft.run.
  #
  # Ruby calls the hooks below whenever a non-blocking fiber would block (a socket read, sleep,
  # Mutex#lock, Process.wait, a DNS lookup...). Each hook parks the calling fiber and hands the
  # thread back to the event loop, which runs other fibers until the awaited event arrives.
  #
  # Readiness comes from io-event's selectors (epoll on Linux, io_uring when built with liburing,
  # kqueue on BSD/macOS), a maintained C library made for exactly this; docs/core.md records why
  # it was chosen over nio4r. Timers live in Weft::Timers.
  #
  # A scheduler belongs to one thread. Only #unblock (Ruby calls it when, say, a thread pushes
  # to a Queue that a task is popping) and #wake_from_any_thread may be called from another.
  class Scheduler
    # Whether IOs have IO#timeout (Ruby 3.2+).
    IO_TIMEOUTS = IO.method_defined?(:timeout)

    # How many spawned tasks a turn starts between two looks at the clock and the timers, and
    # the most it starts without looking (see #spawn).
    START_CHECK = 32

    # How long a turn starts spawned tasks, at least, before a due timer cuts the burst short
    # (see #spawn): so that a PostgreSQL pipeline fed by a burst still sends its statements in
    # large groups (its flush is a timer due at once).
    START_SLICE = 0.001

    # What a fiber parked by Ruby itself (sleep, Mutex, Queue, ConditionVariable...) waits for.
    RUBY_WAIT = :ruby

    # How early a look for I/O may come before a moment and still count as a look at it (see
    # #watched?): epoll's timeout is in whole milliseconds, so a poll meant to end at a timer's
    # moment may end up to a millisecond before it, and the timer then fires after a poll that
    # looked a few microseconds early.
    WATCH_SLACK = 0.001

    # While fibers are ready to run, the loop looks for I/O (and fires due timers) once this many
    # seconds after its last look, not on every turn. Fibers that wake each other (a hand-off
    # through a Queue, a Mutex, a ConditionVariable: Ruby's blockers, which do not go through
    # the selector) otherwise paid a non-blocking epoll_wait per turn, most of what a switch
    # cost: bench/core's ping-pong (a Thread::Queue hand-off per switch) ran 200,000 switches in
    # 0.29-0.31 s with a poll per turn and 0.19 s with 50 us between looks (Ruby 3.3 + YJIT;
    # 100 and 200 us did no better). A turn that I/O woke, or that waits, is not affected: such a
    # turn polls anyway, and a turn of a loaded server takes longer than this. The price: I/O
    # and timers wait up to 50 us longer while other fibers keep the reactor busy.
    POLL_GAP = 0.00005

    # How late past its deadline a coarse timed wait (#io_wait_coarse) may end, at most (plus
    # the delay every timer has under load, see #run_once): the period of the sweep that ends
    # them. Never early.
    COARSE_INTERVAL = 0.01

    # Bounds a fiber's timed #io_wait, with one timer per fiber and reactor that is re-armed
    # lazily. A keep-alive connection waits for its next request with a timeout (linger, idle
    # timeout) and nearly always gets it in time; arming a timer for each such wait and
    # cancelling it when the socket turns readable cost a hello-world request 5 of its 16 Ruby
    # calls, 18 C calls and an object. Here a wait only records its deadline. The timer is
    # armed by the first wait, and is left alone by a wait that ends no sooner than it fires;
    # when it fires and the fiber is in a wait whose deadline is still ahead, it is re-armed
    # for the rest, and when no wait is on, it lapses. So it fires exactly at the current
    # wait's deadline, as a timer per wait did, and is armed at most once per timeout period
    # per fiber, whatever the request rate.
    #
    # Unlike a lazily cancelled heap entry (io-event's), nothing piles up: each fiber has at
    # most one timer, and a lapsed one leaves the heap. The price is that a timer outlives its
    # wait by up to the wait's timeout (Scheduler#statistics counts it meanwhile), holding the
    # fiber; a pooled worker fiber that ends cancels it (#park_worker).
    #
    # A re-armed timer has a duration of its own (the rest of a wait), so it takes a heap entry
    # of its own: with many fibers in waits that keep being renewed (256 lingering connections),
    # each fires once per timeout period and is sifted out of and back into a heap of hundreds.
    # A coarse wait (#wait_coarse) arms no timer at all: the reactor's CoarseSweep ends it.
    class IOTimeout
      # @return [Timers] the reactor's timers it is armed in
      attr_reader :timers
      # @api private: when the fiber's coarse wait ends; nil while it is in none (for the sweep)
      attr_reader :coarse_deadline

      # @param selector the reactor's selector, which the fiber waits in
      # @param timers [Timers] the reactor's timers
      # @param fiber [Fiber] the fiber whose waits it bounds
      # @param sweep [CoarseSweep] the reactor's sweep, which ends coarse waits
      def initialize(selector, timers, fiber, sweep)
        @selector = selector
        @timers = timers
        @fiber = fiber
        @sweep = sweep
        @timer = nil # made by the first wait, then re-armed
        @armed = nil # the time the timer fires at; nil while it is not armed
        @deadline = nil # the time the fiber's current wait ends; nil while it is in none
        @coarse_deadline = nil # the same for a coarse wait
        @swept = false # whether the sweep holds it
      end

      # Parks the fiber in the selector until `io` is ready for `events` or `seconds` pass.
      # Must be called from its fiber.
      # @return [Integer, false] the ready events, or false on timeout
      def wait(io, events, seconds)
        # Timers.now inlined: this runs for every request on a kept-alive connection.
        deadline = @deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
        arm(seconds) unless (armed = @armed) && armed <= deadline
        @selector.io_wait(@fiber, io, events)
      ensure
        @deadline = nil
      end

      # #wait, ended by the sweep: within its interval after `seconds`, never before (see
      # Scheduler#io_wait_coarse). Must be called from its fiber.
      # @return [Integer, false] the ready events, or false on timeout
      def wait_coarse(io, events, seconds)
        @coarse_deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
        unless @swept
          @swept = true
          @sweep.add(self)
        end
        @selector.io_wait(@fiber, io, events)
      ensure
        @coarse_deadline = nil
      end

      # The timer fired: ends the wait if its deadline has come, or sets the timer for the rest.
      # A coarse wait is not its to end: the timer lapses then.
      def call
        @armed = nil
        deadline = @deadline
        return unless deadline # no wait on: the timer lapses until the next one arms it
        remaining = deadline - Timers.now
        return arm(remaining) if remaining.positive?
        # Ends the wait (io-event removes the registration on the way out); the last thing
        # done here, as the fiber may wait again, and re-arm, before the switch comes back.
        @fiber.weft_transfer(false)
      end

      # Called by the sweep that holds it: ends a coarse wait due by `moment` (looked at again:
      # a fiber the sweep resumed before this one may have run since it was found due).
      # @return [Boolean] whether the sweep is to keep it: not once it is in no coarse wait (the
      #   fiber's next one hands it to the sweep again)
      def sweep(moment)
        deadline = @coarse_deadline
        return @swept = false unless deadline
        # The last thing done here, as in #call.
        @fiber.weft_transfer(false) if deadline <= moment
        true
      end

      # Disarms the timer and leaves the sweep; for a fiber that ends, which either would
      # otherwise hold on to.
      def cancel
        @timer&.cancel
        @armed = nil
        return unless @swept
        @swept = false
        @sweep.remove(self)
      end

      private

      def arm(seconds)
        timer = @timer ? @timer.reschedule(seconds) : (@timer = @timers.after(seconds, self))
        @armed = timer.deadline
      end
    end

    # Ends the reactor's coarse timed waits (IOTimeout#wait_coarse): one timer, fired every
    # COARSE_INTERVAL while any fiber may be in such a wait, looks at each and ends those that
    # are due. Waits that are renewed all the time (the linger of 256 busy keep-alive
    # connections) then cost a float store each and a look per interval, instead of a timer
    # per fiber that fires once per timeout period into a heap as large as the fibers
    # (bench/results/server-connections.md).
    #
    # A wait ends once the sweep's moment (its timer's deadline, which the reactor has looked
    # for I/O at or after, see #run_once) has reached its deadline: never before it, and at most
    # one interval after it while the reactor keeps time. An IOTimeout joins on its first
    # coarse wait and leaves at the first sweep that finds it in none, so the sweep looks only
    # at fibers that were waiting at its last look or have waited since; with none left its
    # timer lapses.
    class CoarseSweep
      # @param timers [Timers] the reactor's timers, where its one timer is armed
      # @param interval [Float] seconds between sweeps: how late a coarse wait may end
      def initialize(timers, interval)
        @timers = timers
        @interval = interval
        @waiters = {}.compare_by_identity # IOTimeouts that may be in a coarse wait
        @timer = nil # made for the first waiter, re-armed while there are any
      end

      # @return [Integer] the IOTimeouts it holds
      def size
        @waiters.size
      end

      # Holds `waiter` until a sweep finds it in no coarse wait; arms the timer if it is not.
      def add(waiter)
        @waiters[waiter] = true
        rearm
      end

      # Lets `waiter` go (its fiber ends).
      def remove(waiter)
        @waiters.delete(waiter)
      end

      # The timer fired: the sweep. Most waits are not due (their next request came), so each
      # costs an attribute read here and no call; the others are handed to IOTimeout#sweep
      # afterwards, since a wait it ends resumes its fiber, which may wait again or end before
      # the switch comes back.
      def call
        moment = @timer.deadline
        due = nil
        @waiters.each_key do |waiter|
          deadline = waiter.coarse_deadline
          (due ||= []) << waiter unless deadline && deadline > moment
        end
        due&.each { |waiter| @waiters.delete(waiter) unless waiter.sweep(moment) }
        rearm unless @waiters.empty?
      end

      private

      def rearm
        timer = @timer
        if timer.nil?
          @timer = @timers.after(@interval, self)
        elsif !timer.active?
          timer.reschedule(@interval)
        end
      end
    end

    # Ends a fiber's timed #suspend when its timeout passes: #suspend returns nil to it. Made once
    # per fiber and reactor (see Fiber#weft_suspend_timeout), so that a timed wait (a sleep, a
    # Queue#pop with a timeout) allocates no Proc.
    class SuspendTimeout
      # @return [Scheduler] the reactor it wakes the fiber in: a fiber outlives a reactor when
      #   user code resumes it under the next one on the same thread
      attr_reader :scheduler

      # @param scheduler [Scheduler]
      # @param fiber [Fiber] the fiber whose timed suspends it ends
      def initialize(scheduler, fiber)
        @scheduler = scheduler
        @fiber = fiber
      end

      # The timer's callback: wakes the fiber with nil (its #suspend timed out).
      def call
        @scheduler.wake(@fiber, nil)
      end
    end

    # The reactors open in this process (at most one per thread), for IO#close on one thread to
    # find another thread's reactor that waits on the IO (see #close_from_any_thread). Replaced
    # whole under LIVE_LOCK, read without it.
    @live = [].freeze
    LIVE_LOCK = Thread::Mutex.new

    class << self
      # @api private: the open reactor other than `except` in which a fiber waits on `io` through
      # #io_wait, or nil. One whose thread is gone is passed over: in the child of a fork, the
      # other threads' reactors are copies that nothing runs.
      def waiting_elsewhere(io, except)
        @live.find { |reactor| !reactor.equal?(except) && reactor.waits_on?(io) && reactor.thread.alive? }
      end

      # @api private: `reactor` opened (true) or closed (false)
      def live(reactor, open)
        LIVE_LOCK.synchronize { @live = (open ? [*@live, reactor] : @live - [reactor]).freeze }
      end
    end

    # @return [Timers] the reactor's timers; their callbacks run in the loop fiber
    attr_reader :timers
    # @return [Thread] the thread the reactor runs on
    attr_reader :thread

    # @param fiber_pool_size [Integer] how many idle fibers to keep for reuse by later tasks
    def initialize(selector: nil, fiber_pool_size: 256)
      @thread = Thread.current
      @loop_fiber = Fiber.current
      @selector = selector || IO::Event::Selector.new(@loop_fiber)
      # io_read/io_write only where the selector does the I/O itself (io_uring); elsewhere Ruby
      # reads and writes, and waits through #io_wait (see SelectorIO).
      extend SelectorIO if SelectorIO.worthwhile?(@selector)
      @timers = Timers.new
      @coarse_sweep = CoarseSweep.new(@timers, COARSE_INTERVAL)
      # Fibers parked in #suspend, mapped to what they wait for (the blocker, or true). A wake is
      # honoured only for a fiber found here, which rules out stale wake-ups (see #wake).
      @suspended = {}.compare_by_identity
      # Fibers woken and waiting for their turn, mapped to the value #suspend returns to them.
      # A Hash rather than an Array so that a fiber raised into while queued can be taken out.
      @ready = {}.compare_by_identity
      # The fibers of the turn being run: #run_ready swaps it with @ready, so that wake-ups
      # during the turn go to the other Hash. Holds only fibers still waiting for their turn.
      @running = {}.compare_by_identity
      # Tasks spawned and waiting to start, in spawn order.
      @starting = []
      # Set when a turn cut a burst of starts short: the next turn runs the fibers the cut let in
      # before it starts the rest (see #start_burst).
      @burst_cut = false
      # Idle fibers that ran a task and wait for the next one (see #worker_fiber).
      @idle_fibers = []
      @fiber_pool_size = fiber_pool_size
      # Exceptions to raise into suspended tasks (cancellation); delivered by the loop fiber.
      @raises = {}.compare_by_identity
      # The IO being closed for a caller on another thread (#close_for_another_thread).
      @closing_for_another_thread = nil
      # Wake-ups (and cancellations, see #cancel_from_any_thread) posted from other threads,
      # handed over under a lock and applied on the reactor thread by a small fiber of its own
      # (see #wake_from_any_thread).
      @foreign_wakeups = []
      @foreign_lock = Thread::Mutex.new
      @foreign_drain = Fiber.new(blocking: true) do
        loop do
          take_foreign_wakeups
          @selector.transfer
        end
      end
      @tasks = {}.compare_by_identity
      @interrupted_pids = {} # see #process_wait
      @unobserved = {}.compare_by_identity
      @spawned = 0
      @polls = 0
      @max_lag = 0.0
      @lag = 0.0
      @turn_started = nil
      # When the current poll (#select) began, and when the latest poll that has returned and
      # the one before it looked for ready I/O: see #watched? and #readiness_floor.
      @poll_started = nil
      @watched = nil
      @earlier_watched = nil
      @closed = false
      # Set in the child of a fork: this copy of the reactor belongs to the parent (see #process_fork).
      @forked = false
      # Every fiber that runs tasks, idle or not: user code must not switch into these itself
      # (see FiberControl).
      @workers = {}.compare_by_identity
      # The IOs fibers wait on in #io_wait, each mapped to its fiber (an Array of them when
      # several wait on one IO): IO#close raises IOError into them (see #io_closing).
      @io_waiters = {}.compare_by_identity
      Scheduler.live(self, true)
    end

    # --- Running -----------------------------------------------------------------------------

    # Runs the event loop until every task has ended. Must be called from the loop fiber.
    def run
      raise UsageError, "the reactor's loop can only run in the fiber that created it" unless Fiber.current.equal?(@loop_fiber)
      run_once until @tasks.empty?
    rescue Exception # rubocop:disable Lint/RescueException
      # An Interrupt or SystemExit escaped a task or struck the loop itself: unwind every task
      # (their ensure blocks run) before letting it propagate out of Weft.run.
      cancel_all
      raise
    end

    # One turn of the loop: deliver cancellations, start spawned tasks, run woken fibers, wait
    # for I/O or the next timer, fire due timers. A turn that has woken fibers to run and comes
    # within POLL_GAP of the last look ends before the look: the next runs them.
    #
    # A timer fires only once the reactor has looked for I/O at or after its moment (within
    # WATCH_SLACK). A poll looks before it runs the fibers it wakes; when they keep the CPU
    # longer than that (or this process waits for a core meanwhile), a timer that came due
    # during their work waits for the next poll, which does not block since a timer is due.
    # So a wait whose I/O came in time is woken by it rather than timed out with the answer
    # unread, and a wait that does time out is known to have had nothing ready at its moment
    # (#watched?). The price: under such load a timer fires up to one poll's work later.
    def run_once
      deliver_raises unless @raises.empty?
      if @burst_cut
        @burst_cut = false
      elsif !@starting.empty?
        start_spawned
      end
      run_ready unless @ready.empty?
      return if @tasks.empty? # the last task just ended: do not wait for events nobody wants

      interval = @ready.empty? && @raises.empty? && @starting.empty? ? @timers.wait_interval : 0
      now = Timers.now
      # Fibers woken this turn run first if the last look was a moment ago (see POLL_GAP); the
      # look, the timers and the bookkeeping that goes with them wait for a later turn.
      return if !@ready.empty? && @poll_started && now - @poll_started < POLL_GAP

      record_lag(now - @turn_started) if @turn_started
      @earlier_watched = @watched
      @poll_started = now
      @polls += 1
      @selector.select(interval)
      now = @turn_started = Timers.now
      # The poll looked when it began if it did not block, and when its wait ended if it did. A
      # poll that returned within WATCH_SLACK looked within it of its start: the selector is
      # asked how long it waited only when that makes a difference.
      looked = @poll_started
      looked += @selector.idle_duration if now - looked > WATCH_SLACK
      @watched = looked
      # Only the timers due by its look (see above); the others wait for the next poll.
      @timers.fire(looked + WATCH_SLACK < now ? looked + WATCH_SLACK : now)
    end

    # Called by Ruby from Fiber.set_scheduler(nil) or when the thread exits: finish the work
    # still pending, then release the selector. (In a forked child there is nothing to do: see
    # #process_fork.)
    def close
      return if @closed
      run unless @tasks.empty?
      @unobserved.keys.each(&:call)
    ensure
      unless @closed
        @closed = true
        Scheduler.live(self, false)
        close_leftover_foreign_work
        @selector.close
      end
    end

    # Called in the child of a fork (Weft::ForkHandler hooks Process._fork): everything here is a
    # copy of the parent's reactor. Running it would run the parent's tasks a second time, and the
    # selector's epoll descriptor still refers to the parent's epoll instance, so polling or
    # registering through it would take events and registrations away from the parent. The child
    # therefore starts without a scheduler, as only the calling thread survives a fork: the fiber
    # that forked goes on alone, blocking like plain Ruby, and may start a reactor of its own with
    # Weft.run. Closing the child's duplicates of the selector's descriptors leaves the parent's
    # epoll instance and its registrations untouched (io-event's close only closes them).
    def process_fork
      @forked = true
      @closed = true # so that the #close that Fiber.set_scheduler calls does nothing
      Scheduler.live(self, false)
      @selector.close
      Fiber.set_scheduler(nil)
    end

    # --- Tasks -------------------------------------------------------------------------------

    # Creates a task running the block. The task starts on the loop's next turn, in spawn order.
    # Use Weft.spawn; this is its mechanism.
    #
    # Starting lazily is cheap: spawning is an allocation, and a batch of new tasks then runs in
    # one turn, each returning straight to the loop when it suspends or ends. Starting at once
    # (as #fiber must) costs the spawner a trip through the loop for every task.
    #
    # A burst is cut short once a timer has come due and the turn has spent START_SLICE starting it:
    # the rest starts on the next turns, still in spawn order and ahead of the tasks the burst
    # spawned, with I/O polled, the due timers fired and the fibers they woke run in between (see
    # #start_burst). Started in one turn, a burst of 10,000 tasks that sleep 0-50 ms (bench/core's
    # timers row) held every timer back for the ~150 ms it took, and kept all 10,000 fibers alive at
    # once, each on a fresh fiber stack, which Ruby maps and guards (mprotect) and the kernel faults
    # in page by page: ~12 us a fiber against ~2 us for a reused one. Cut, the tasks whose sleep has
    # ended hand their fibers to the next ones: about half as many stacks are made (the process's
    # page faults 41,600 -> 22,000 on Ruby 3.3), for a quarter less CPU, and the first timer fires
    # ~15 ms after the burst was spawned rather than ~160 ms. A burst with no timer due (a server's
    # accept burst, a spawn loop) starts in one turn as before.
    #
    # The task inherits `deadline`: by default the spawner's (see Weft.deadline), none for a
    # detached task (no parent), which must outlive its spawner and so is not bound by its
    # spawner's deadline.
    # @return [Task]
    def spawn(parent, name, args, block, deadline = parent && Deadline.current)
      task = register(parent, name, args, block, deadline)
      @starting << task
      task
    end

    # @api private: a task's fiber calls this as it ends.
    def task_ended(task)
      @tasks.delete(task)
    end

    # @api private: failures nobody observed yet, reported at the latest when the reactor closes
    def track_unobserved(report)
      @unobserved[report] = true
    end

    # @api private
    def forget_unobserved(report)
      @unobserved.delete(report)
    end

    # @api private: the tasks alive in this reactor now (Weft::Server::Warmup cancels those an
    # app left running, which would keep its reactor from ending)
    # @return [Array<Task>]
    def live_tasks
      @tasks.keys
    end

    # Cancels every live task and gives them up to `grace` seconds of turns to run their ensure
    # blocks; used when the reactor is torn down by a signal or exit.
    def cancel_all(grace: 5)
      @tasks.each_key(&:cancel)
      deadline = Timers.now + grace
      run_once until @tasks.empty? || @closed || Timers.now > deadline
    end

    # --- Suspension: the single way Weft parks a fiber -----------------------------------------

    # Parks the current fiber until #wake is called for it, `timeout` seconds pass, or an
    # exception is raised into it. `blocker` names what it waits for: wake-ups naming another
    # blocker are ignored.
    # @return the value passed to #wake, or nil on timeout
    def suspend(timeout = nil, blocker = true)
      fiber = Fiber.current
      if fiber.equal?(@loop_fiber)
        raise UsageError, "cannot block the reactor's own loop fiber; do this inside a task (Weft.spawn)"
      end

      @suspended[fiber] = blocker
      timer = @timers.after(timeout, suspend_timeout(fiber)) if timeout
      value = @selector.transfer
      # Resumed by its turn (#run_ready), which only #wake gives a fiber parked here: #wake took
      # it out of @suspended, so the ensure need not (a Hash delete per wait).
      woken = true
      value
    rescue Exception # rubocop:disable Lint/RescueException
      # Raised into (a cancellation, Fiber#raise), maybe after a wake-up queued it: its turn
      # must not come. Resumed by its turn instead, it is in neither queue (#run_ready).
      @ready.delete(fiber)
      @running.delete(fiber)
      raise
    ensure
      @suspended.delete(fiber) unless woken # raised into, killed (Fiber#kill runs no rescue)
      timer&.cancel
    end

    # Makes a fiber parked in #suspend runnable; it resumes on the loop's next turn with
    # `value` as #suspend's result. Must be called on the reactor's thread.
    # @return [Boolean] false if the fiber was not parked (or was parked on another blocker)
    def wake(fiber, value = true, blocker = nil)
      expected = @suspended.delete(fiber)
      return false if expected.nil?
      if blocker && !expected.equal?(blocker)
        @suspended[fiber] = expected # parked on something else: it stays parked
        return false
      end
      @ready[fiber] = value
      true
    end

    # Raises `exception` into a suspended task on the loop's next turn. Used for cancellation,
    # so that Task#cancel never switches fibers itself.
    def raise_later(task, exception)
      @raises[task] = exception
    end

    # --- Fiber::Scheduler hooks ----------------------------------------------------------------

    # Kernel#sleep.
    def kernel_sleep(duration = nil)
      suspend(duration, RUBY_WAIT)
      true
    end

    # Mutex#lock, Queue#pop, ConditionVariable#wait, Thread#join... when they must wait.
    # @return [Boolean] false on timeout
    def block(_blocker, timeout = nil)
      suspend(timeout, RUBY_WAIT) ? true : false
    end

    # Wakes a fiber parked by #block or #kernel_sleep. Ruby may call this from any thread. The
    # blocker Ruby passes here is not always the one it passed to #block (ConditionVariable waits
    # arrive through #kernel_sleep), so any Ruby-level wait may be woken; Weft's own waits are not.
    def unblock(_blocker, fiber)
      # The reactor's own thread (a Queue hand-off between tasks) is the hot case: straight to #wake.
      return wake(fiber, true, RUBY_WAIT) if Thread.current.equal?(@thread)
      wake_from_any_thread(fiber, RUBY_WAIT)
    end

    # #wake, callable from any thread.
    def wake_from_any_thread(fiber, blocker)
      if Thread.current.equal?(@thread)
        wake(fiber, true, blocker)
      else
        post_from_any_thread(fiber, blocker)
      end
    end

    # @api private: Task#cancel called on another thread. Cancelling touches the reactor's books
    # and only a turn of the loop delivers it, so it is handed to the reactor's thread, which
    # cancels the task there; done on the calling thread, it waited for whatever next woke an
    # idle reactor (forever, for a task waiting on a Queue nobody fills).
    def cancel_from_any_thread(task, message)
      post_from_any_thread(task, message)
    end

    # IO#wait_readable, IO#wait_writable, IO#wait, and the non-blocking retry loops of every
    # socket method.
    # @return [Integer, false] the ready events, or false on timeout
    def io_wait(io, events, timeout = nil)
      # With no timeout of its own, a wait is bounded by the IO's IO#timeout (Ruby 3.2+), as
      # Ruby bounds it without a scheduler: Ruby 3.3 passes nil here after a read that found
      # nothing, and raises IO::TimeoutError itself when this returns false.
      timeout = io.timeout if timeout.nil? && IO_TIMEOUTS
      events |= IO::READABLE if events == IO::WRITABLE && pipe_write_end?(io)
      fiber = Fiber.current
      waiters = @io_waiters
      waiting = waiters[io]
      waiters[io] = waiting ? [*waiting, fiber] : fiber
      begin
        return @selector.io_wait(fiber, io, events) unless timeout
        io_timeout(fiber).wait(io, events, timeout)
      ensure
        waiting = waiters.delete(io)
        forget_shared_io_wait(io, waiting, fiber) unless waiting.equal?(fiber)
      end
    end

    # @api private: IO#close of `io` on this reactor's thread (Weft::IOCloseNotice), around the
    # close itself (the block). The fibers waiting on `io` in #io_wait get IOError, as threads
    # blocked on an IO that another thread closes do: closing a descriptor takes it out of epoll
    # without an event, so they waited forever (Ruby 3.5 hands this to the scheduler itself, as
    # Fiber::Scheduler#fiber_interrupt). Raised before the close, at once, through Fiber#raise
    # (see FiberControl): closing first hung the closer too on Ruby 3.1, whose close then waited
    # for the parked reader as for a read under way (where in Ruby was not looked into). The
    # closer goes on, and closes, on the loop's next turn. A task whose cancellation is on its
    # way (cancel, then close, in one turn: the server's shutdown) gets that instead.
    def io_closing(io)
      waiting = @io_waiters.delete(io)
      if waiting
        message = @closing_for_another_thread.equal?(io) ? CLOSED_IN_ANOTHER_THREAD : CLOSED_IN_ANOTHER_FIBER
        Array(waiting).each do |fiber|
          fiber.raise(IOError, message) unless @raises.each_key.any? { |task| task.fiber.equal?(fiber) }
        end
      end
      yield
    end

    # What the fibers waiting on an IO closed by another fiber of this reactor are told
    # (#io_closing); Ruby's own words for a thread's IO closed by another thread, which a close
    # handed over from another thread (#close_from_any_thread) gives them.
    CLOSED_IN_ANOTHER_FIBER = "stream closed in another fiber"
    CLOSED_IN_ANOTHER_THREAD = "stream closed in another thread"

    # @api private: whether a fiber of this reactor waits on `io` through #io_wait (read from
    # any thread: a lookup in a Hash compared by identity runs no Ruby code, so the GVL keeps it
    # whole)
    def waits_on?(io)
      @io_waiters.key?(io)
    end

    # @api private: IO#close of `io` called on another thread while a fiber of this reactor
    # waits on it (Weft::IOCloseNotice). Closed on that thread, Ruby raised its IOError ("stream
    # closed in another thread") into whatever fiber this reactor's thread ran next, the loop's
    # own included, which ended Weft.run; and a fiber waiting through IO#wait_readable was never
    # told and waited forever. So the close is handed to this reactor's thread, where
    # #io_closing raises IOError into exactly the fibers that wait on `io`, and the caller waits
    # for it there: while this reactor is busy (a task that never yields), the caller waits too.
    # @return [Thread::Queue, nil] gets nil once `io` is closed, or what the close raised; nil
    #   if this reactor has closed (the caller then closes `io` itself)
    def close_from_any_thread(io)
      outcome = Thread::Queue.new
      outcome if post_from_any_thread(ForeignClose.new(io, outcome), nil)
    end

    # An IO#close handed to the reactor's thread (see #close_from_any_thread).
    ForeignClose = Struct.new(:io, :outcome) do
      # Closes the IO on the current thread, for `scheduler` (the reactor's), and hands the
      # outcome to the waiting caller.
      def call(scheduler)
        scheduler.close_for_another_thread(io)
        outcome << nil
      rescue Exception => e # rubocop:disable Lint/RescueException -- the caller's to handle, as if it had closed
        outcome << e
      end
    end

    # @api private: closes `io` for a caller on another thread (ForeignClose), so that the
    # fibers waiting on it are told who closed it (#io_closing).
    def close_for_another_thread(io)
      @closing_for_another_thread = io
      io.close
    ensure
      @closing_for_another_thread = nil
    end

    # #io_wait with a timeout that needs no precision (a server connection lingering for its
    # next request): the wait ends no earlier than `timeout` seconds on and at most
    # COARSE_INTERVAL after that (plus the delay every timer has under load). It arms no timer:
    # one sweep ends every such wait that is due (CoarseSweep), which costs far less than a
    # timer per fiber when many fibers wait and most waits end in time.
    # @param timeout [Numeric] seconds, above 0
    # @return [Integer, false] the ready events, or false on timeout
    def io_wait_coarse(io, events, timeout)
      coarse_waiter.wait_coarse(io, events, timeout)
    end

    # What #io_wait_coarse waits with in the current fiber, for code that waits many times in a
    # row in one fiber (a server connection's request loop): `waiter.wait_coarse(io, events,
    # timeout)` is #io_wait_coarse without finding the fiber's waiter on every call (the
    # scheduler, the current fiber, and its waiter in the Fiber's own instance variables, which
    # Ruby keeps in a process-wide table: three lookups per wait that touch memory of its own
    # for each of hundreds of connections). Valid in this fiber, under this reactor only.
    # @return [IOTimeout]
    def coarse_waiter
      io_timeout(Fiber.current)
    end

    # No io_pread/io_pwrite (Ruby 3.3 routes IO#pread/#pwrite to them where they exist): without
    # them Ruby reads and writes the file itself, in the caller's thread, and the reactor waits
    # for the file as on Rubies without these hooks. Both ways they had on 3.3.8 hung the
    # process: on a helper thread, as soon as a pwrite and a pread met; in a blocking fiber
    # (IO::Buffer#pread/#pwrite), at its exit, its timer thread spinning as the VM stopped it
    # (10 of 100 runs of five tasks' pwrite and pread at load 6-8; none of 100 without the
    # hooks). test/newer_hooks_test.rb.

    if RUBY_VERSION >= "3.2"
      # IO.select (hooked from Ruby 3.2). A multi-IO select has no single readiness to wait on
      # in the selector, so it runs on a helper thread while the fiber waits.
      def io_select(readables, writables, exceptables, timeout)
        run_blocking { ::IO.select(readables, writables, exceptables, timeout) }
      end
    end

    if RUBY_VERSION >= "3.4"
      # Ruby 3.4 offers C extensions' blocking regions (zlib, digest, ...) to the scheduler; run
      # them on a helper thread so the reactor keeps turning.
      def blocking_operation_wait(work)
        run_blocking(&work)
      end
    end

    # Process.wait and friends; io-event waits on a pidfd, so the thread never blocks.
    #
    # A wait that ends early (a deadline, a cancellation) leaves io-event 1.11 believing the
    # closed pidfd is still registered for that pid, and the next wait for the same pid, given the
    # same descriptor number, would never wake. That next wait runs on a helper thread instead.
    #
    # io-event answers nil when it was woken although the process has not exited: by a readiness
    # event that a pidfd copy in a child forked a moment ago kept alive (see ForkHandler). Waiting
    # again in io-event at once would reuse the descriptor number while its bookkeeping still
    # holds the old registration, and never wake; the helper thread cannot be fooled.
    def process_wait(pid, flags)
      return run_blocking { Process::Status.wait(pid, flags) } if @interrupted_pids.delete(pid)
      waited = false
      status = ForkHandler.waiting_for_process { @selector.process_wait(Fiber.current, pid, flags) } ||
        run_blocking { Process::Status.wait(pid, flags) }
      waited = true
      status
    ensure
      @interrupted_pids[pid] = true unless waited
    end

    # Addrinfo.getaddrinfo, TCPSocket.new, Net::HTTP... for names that are not IP literals.
    # getaddrinfo(3) runs on a helper thread, so /etc/hosts, nsswitch and IPv6 ordering behave
    # exactly as without Weft while the reactor keeps turning. (Resolv would keep it in the
    # reactor, but on Ruby 3.1 its IO.select blocks the whole thread.)
    def address_resolve(hostname)
      hostname = hostname.split("%", 2).first # an IPv6 zone id is not part of the name
      run_blocking do
        Addrinfo.getaddrinfo(hostname, nil, nil, :STREAM).map(&:ip_address).uniq
      end
    end

    # Timeout.timeout, and Weft.timeout.
    def timeout_after(duration, exception_class = TimeoutError, *message)
      fiber = Fiber.current
      timer = @timers.after(duration) { fiber.raise(exception_class, *message) if fiber.alive? }
      yield duration
    ensure
      timer&.cancel
    end

    # Fiber.schedule: a task without a name, started at once as Ruby's documentation of
    # Fiber.schedule asks.
    # @return [Fiber] the fiber the task started in
    def fiber(&block)
      parent = Task.current
      start(register(parent, nil, [], block, parent && Deadline.current))
    end

    # --- User code switching fibers (see FiberControl) -----------------------------------------

    # @api private: Fiber#raise of `target` from the current fiber; the block is Ruby's own.
    # Into a task's fiber from another fiber, the caller is queued to go on on the loop's next turn
    # (the target hands the thread to the loop, not back to the caller, once it waits again). If
    # control comes back to the caller some other way first, the queued turn is withdrawn.
    def fiber_raise(target)
      current = Fiber.current
      return yield if current.equal?(@loop_fiber) || current.equal?(target)
      refuse_fiber_switch("raise into", target) if target.equal?(@loop_fiber)
      refuse_fiber_switch("raise into", target, "its task has ended") if @idle_fibers.include?(target)
      return yield unless @workers.key?(target)

      @ready[current] = nil
      begin
        yield
      ensure
        @ready.delete(current)
        @running.delete(current) # queued, and a turn began, before control came back
      end
    end

    # @api private: Fiber#transfer of `target` from the current fiber (the loop's own pass).
    def check_fiber_transfer(target)
      return if Fiber.current.equal?(@loop_fiber)
      refuse_fiber_switch("transfer to", target) if target.equal?(@loop_fiber) || @workers.key?(target)
    end

    # @api private: Fiber#kill (Ruby 3.3+) of `target`.
    def check_fiber_kill(target)
      refuse_fiber_switch("kill", target) if target.equal?(@loop_fiber) || @workers.key?(target)
    end

    # --- Helpers -------------------------------------------------------------------------------

    # Runs the block on a new thread and parks the current fiber until it is done.
    # @return the block's value; re-raises its exception
    def run_blocking
      fiber = Fiber.current
      # A blocker of its own, so that a helper finishing late (after its fiber was cancelled)
      # cannot wake that fiber from an unrelated wait.
      blocker = Object.new
      outcome = nil
      worker = Thread.new do
        outcome = [:value, yield]
      rescue Exception => e # rubocop:disable Lint/RescueException
        outcome = [:error, e]
      ensure
        wake_from_any_thread(fiber, blocker)
      end
      worker.report_on_exception = false
      suspend(nil, blocker) until outcome
      kind, result = outcome
      raise result if kind == :error
      result
    ensure
      worker&.kill unless outcome # the fiber was cancelled: the thread's result has no reader
    end

    # For a fiber that this reactor has just woken for I/O readiness: the earliest moment that
    # readiness can have come about, as far as the reactor can tell. Code that times work done
    # on the far side of a socket (a database statement) uses it so as not to count the time
    # the reactor spent running other fibers before it looked at the socket and got to the
    # waiting fiber.
    #
    # io-event resumes the fibers whose I/O is ready inside the selector's poll, so the fiber
    # runs within the poll that found its I/O ready. If that poll blocked, nothing was ready
    # when it began, and it returned as soon as something was: the I/O became ready when the
    # wait ended (the selector's idle_duration from the poll's start). If it did not block, the
    # I/O was not ready when the poll before it looked (see #watched?), if the fiber was
    # already waiting then (that is, if that look came after `since`), so it became ready
    # after that look. Otherwise the reactor cannot tell.
    #
    # The answer is a lower bound but for one thing: the operating system's delay in giving
    # this thread a core back after a blocking poll is part of the wait as the selector
    # measures it.
    # @param since [Float] monotonic time (Timers.now) at which the fiber began to wait, with
    #   no wait between then and the one it has just come back from
    # @return [Float, nil] monotonic time, later than `since`; nil when the reactor cannot tell
    def readiness_floor(since)
      idle = @selector.idle_duration
      floor = idle > 0 ? @poll_started + idle : @earlier_watched
      floor if floor && floor > since
    end

    # Whether the reactor looked for ready I/O at `moment` or later (within WATCH_SLACK): for a
    # fiber whose wait ran out of time at `moment` and that is still waiting, or was until that
    # look, whether the awaited I/O is known to have been late. When the reactor last looked
    # well before the moment and has been running fibers since (or this process waited for a
    # CPU while it ran them), the I/O may have come in time and lain unread: no evidence either
    # way. Code that judges a dependency by its timeouts (Weft::CircuitBreaker) uses it.
    #
    # The last look (a lower bound) is when the latest poll that has returned began, if it did
    # not block, or when its wait ended (the selector's idle_duration from its start); asked
    # from a fiber that a poll still under way runs, it is the poll before that one.
    # @param moment [Float] monotonic time
    def watched?(moment)
      watched = @watched
      !watched.nil? && watched >= moment - WATCH_SLACK
    end

    # How long the reactor's latest turn kept the thread busy, in seconds: the fibers it ran
    # before its poll (the lag) and those the poll resumed after its wait (the selector resumes
    # a socket's waiter itself). Work put off to the next turn waits about that long if turns
    # stay alike (Postgres::Pipeline holds a segment back only while this is short). Worked out
    # when asked, from the latest poll's start and end and the selector's wait, which stay as
    # they are until the next poll: not a cost of every turn.
    # @return [Float]
    def busy
      return 0.0 unless @turn_started && @poll_started
      @lag + (@turn_started - @poll_started - @selector.idle_duration)
    end

    # Whether fibers woken so far wait for their turn: the next turn runs them first.
    # @return [Boolean]
    def ready?
      !@ready.empty?
    end

    # Counters for statistics pages and tests. `timers` counts every armed timer, including
    # the timer of a fiber's last timed I/O wait until it lapses (see IOTimeout) and the coarse
    # sweep's while it runs; `coarse_waiters` the fibers the sweep looks at (see CoarseSweep);
    # `polls` the loop's looks for I/O so far (see POLL_GAP).
    # @return [Hash]
    def statistics
      {
        tasks: @tasks.size,
        spawned: @spawned,
        polls: @polls,
        timers: @timers.size,
        coarse_waiters: @coarse_sweep.size,
        ready: @ready.size,
        idle_fibers: @idle_fibers.size,
        lag: @lag,
        max_lag: @max_lag
      }
    end

    private

    def register(parent, name, args, block, deadline)
      task = Task.new(self, parent, name, args, block, deadline)
      @tasks[task] = true
      @spawned += 1
      task
    end

    # Starts a task at once, in a pooled fiber, and returns when it first suspends or ends.
    # @return [Fiber] the fiber it runs in
    def start(task)
      fiber = @idle_fibers.pop || worker_fiber
      if Fiber.current.equal?(@loop_fiber)
        fiber.weft_transfer(task)
      else
        # Queues the current fiber to continue on the loop's next turn, then enters the task.
        @selector.resume(fiber, task)
      end
      fiber
    end

    # A fiber that runs tasks one after another. Between tasks it waits in @idle_fibers, so a
    # spawn costs no fiber allocation and a burst of short tasks reuses one stack. (Ruby 3.1
    # also frees the stack of a fiber entered by transfer only when the Fiber is collected, so
    # a fresh fiber per task would let a burst of tens of thousands of tasks exhaust the
    # process's memory mappings before the GC runs.)
    def worker_fiber
      # Non-blocking is Fiber.new's default; saying so (`blocking: false`, a keyword to a C
      # method) cost two Hashes per fiber.
      fiber = Fiber.new do |task|
        while task
          task.execute
          task = park_worker(task)
        end
        @workers.delete(Fiber.current)
      end
      @workers[fiber] = true
      fiber
    end

    # Called by a worker whose task ended: waits for the next task, or returns nil to let the
    # fiber end when the pool is full.
    def park_worker(ended)
      finish_forked_child(ended) if @forked
      # Fiber-local variables belong to the task that set them, not to the next one.
      locals = Thread.current
      locals.keys.each { |key| locals[key] = nil }
      fiber = Fiber.current
      forget_library_state(fiber)
      if @idle_fibers.size >= @fiber_pool_size
        # The fiber ends: its io_wait timer, still armed, or the coarse sweep would keep it
        # (and, on Ruby 3.1, its stack) alive until the timer lapsed or the next sweep.
        fiber.weft_io_timeout&.cancel
        return nil
      end
      @idle_fibers << fiber
      @selector.transfer
    end

    # Per-fiber state that libraries keep in the Fiber object's own instance variables belongs
    # to the task as well: ActiveSupport's IsolatedExecutionState (isolation_level :fiber) keeps
    # the ActiveRecord connection a fiber holds and CurrentAttributes there, and a reused fiber
    # would hand them to the next task. Weft's own reusable per-fiber object stays.
    def forget_library_state(fiber)
      fiber.instance_variables.each do |name|
        fiber.remove_instance_variable(name) unless WEFT_FIBER_STATE.include?(name)
      end
    end

    # The Fiber instance variables Weft itself keeps for reuse (see fiber_control.rb).
    WEFT_FIBER_STATE = %i[@weft_io_timeout @weft_suspend_timeout].freeze
    private_constant :WEFT_FIBER_STATE

    # Whether `io` is the write end of a pipe (or FIFO) and nothing else. When the read end
    # closes, epoll reports EPOLLERR alone on it, never EPOLLOUT, and io-event (1.11, and its source
    # of August 2026) reports EPOLLERR as readable only: a writer waiting for room in the pipe was never
    # woken, so writing a large input to a command that exits without reading it all
    # (Open3.popen2("head", ...)) hung where Ruby raises Errno::EPIPE. Waiting for readable as
    # well wakes it, and its retried write raises EPIPE. A write-only pipe descriptor is never
    # readable otherwise, so that adds no wake-ups; sockets (which report EPOLLOUT with the
    # error) and descriptors open for reading too are left alone. Two system calls, on a wait
    # for room in a full pipe only.
    def pipe_write_end?(io)
      !io.is_a?(BasicSocket) && (io.fcntl(Fcntl::F_GETFL) & Fcntl::O_ACCMODE) == Fcntl::O_WRONLY && io.stat.pipe?
    rescue SystemCallError, IOError, NotImplementedError
      false
    end

    # The end of a #io_wait for `fiber` that found `waiting` under its IO (taken out): other
    # fibers' waits on the IO go back, and nothing if IO#close took them already.
    def forget_shared_io_wait(io, waiting, fiber)
      return unless waiting
      others = waiting.is_a?(Array) ? waiting.reject { |other| other.equal?(fiber) } : [waiting]
      @io_waiters[io] = others.size == 1 ? others.first : others unless others.empty?
    end

    # The fiber's IOTimeout for this reactor, made on its first timed I/O wait here.
    def io_timeout(fiber)
      waiter = fiber.weft_io_timeout
      return waiter if waiter&.timers.equal?(@timers)
      fiber.weft_io_timeout = IOTimeout.new(@selector, @timers, fiber, @coarse_sweep)
    end

    # The fiber's SuspendTimeout for this reactor, made on its first timed wait here.
    def suspend_timeout(fiber)
      callback = fiber.weft_suspend_timeout
      return callback if callback&.scheduler.equal?(self)
      fiber.weft_suspend_timeout = SuspendTimeout.new(self, fiber)
    end

    # In a forked child this fiber went on with its task without a reactor (#process_fork). The
    # task is over, and so is the child, as a forked thread that ends takes its process with it:
    # with status 1 if the task failed. Nothing in this process can wait for the task any more,
    # so its failure is logged now (whoever observed it is the parent's).
    def finish_forked_child(task)
      if task.failed?
        task.observed! # no second report at exit
        UnobservedFailure.new(self, task).call
      end
      exit(!task.failed?)
    end

    def refuse_fiber_switch(action, target, why = "the reactor schedules it")
      what = target.equal?(@loop_fiber) ? "the Weft reactor's loop fiber" : "a fiber that Weft runs tasks in (#{why})"
      raise FiberError, "attempt to #{action} #{what}; reach a task with Task#cancel, a Queue or a Weft::Promise"
    end

    def start_spawned
      # Only the tasks spawned before this turn began: tasks they spawn start next turn.
      starting = @starting
      @starting = []
      return start_burst(starting) if starting.size > START_CHECK
      starting.each { |task| start(task) }
    end

    # Starts a burst of more than START_CHECK spawned tasks in spawn order until a timer has come
    # due and the turn has spent START_SLICE starting them (see #spawn). The rest go back to the
    # head of the queue, ahead of whatever the started tasks spawned: the loop polls I/O and
    # fires the due timers, runs the fibers they woke (whose tasks may end and hand their fibers
    # on) on the next turn, and starts the rest on the turn after.
    def start_burst(starting)
      size = starting.size
      slice_end = Timers.now + START_SLICE
      index = 0
      while index < size
        start(starting[index])
        index += 1
        next unless (index % START_CHECK).zero? && index < size

        deadline = @timers.next_deadline
        next unless deadline && (now = Timers.now) >= deadline && now >= slice_end

        starting.shift(index)
        @starting = starting.concat(@starting)
        @burst_cut = true
        return
      end
    end

    def run_ready
      # Run only the fibers that were ready when this turn began: ones woken meanwhile wait for
      # the next turn, after I/O has been polled, so busy fibers cannot starve the sockets. The
      # turn's Hash is walked in place while wake-ups go to the other, empty one: taking the
      # fibers out with Hash#shift made a [fiber, value] Array for every wake-up. Each entry
      # leaves before its fiber runs, so that the Hash holds only fibers still to run (a fiber
      # raised into before its turn takes itself out, see #suspend, and the walk skips it).
      running = @ready
      @ready = @running
      @running = running
      running.each_pair do |fiber, value|
        running.delete(fiber)
        fiber.weft_transfer(value) if fiber.alive?
      end
    ensure
      # An exception escaped the walk (an Interrupt in the loop fiber): the fibers it did not
      # reach go first on the next turn, as they would have stayed at the head of one queue.
      unless running.empty?
        @running = @ready
        @ready = running.update(@running)
        @running.clear
      end
    end

    def deliver_raises
      raises = @raises
      @raises = {}.compare_by_identity
      raises.each do |task, exception|
        fiber = task.fiber
        next unless fiber && !task.done?
        # A fiber can die under its task only by Thread#kill of this thread (see Task#abandon).
        fiber.alive? ? fiber.raise(exception) : task.abandon
      end
    end

    # Hands `target` (a fiber to wake, with its blocker as `argument`, a task to cancel, with the
    # message, or a ForeignClose) to the reactor's thread.
    # @return [Boolean] false if the reactor has closed (nothing will take it)
    def post_from_any_thread(target, argument)
      @foreign_lock.synchronize do
        return false if @foreign_wakeups.frozen?

        @foreign_wakeups << [target, argument]
      end
      # Queueing the drain fiber in the selector is what makes this race-free: the selector
      # looks at its ready queue immediately before it blocks, with no gap in which another
      # thread could run, and #wakeup interrupts it if it is blocked already.
      @selector.push(@foreign_drain)
      @selector.wakeup
      true
    end

    # As the reactor closes: later posts are refused, and a close posted before that (which no
    # turn of the loop will take now) is done here, so that its caller does not wait forever.
    def close_leftover_foreign_work
      swap_foreign_wakeups([].freeze).each { |target, _| target.call(self) if target.is_a?(ForeignClose) }
    end

    # The posts from other threads so far, replaced by `replacement` unless the reactor has
    # closed (a frozen list: see #close_leftover_foreign_work).
    def swap_foreign_wakeups(replacement)
      @foreign_lock.synchronize do
        taken = @foreign_wakeups
        @foreign_wakeups = replacement unless taken.frozen?
        taken
      end
    end

    def take_foreign_wakeups
      swap_foreign_wakeups([]).each do |target, argument|
        if target.is_a?(Task)
          target.cancel(argument)
        elsif target.is_a?(ForeignClose)
          target.call(self)
        else
          wake(target, true, argument)
        end
      end
    end

    # Lag is how long the loop ran fibers between two polls: the longest an event that arrived
    # meanwhile had to wait for its fiber.
    def record_lag(busy)
      @lag = busy
      @max_lag = busy if busy > @max_lag
    end
  end
end
