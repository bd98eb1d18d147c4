# frozen_string_literal: true

module Weft
  # Gives the child of a fork made inside a reactor a clean start: no scheduler, only the fiber
  # that forked (see Scheduler#process_fork).
  #
  # Process._fork (Ruby 3.1+) is the one method that Kernel#fork, Process.fork and
  # IO.popen("-") all go through, in the parent and in the child. `system`, `spawn`, backticks
  # and IO.popen of a command exec at once in their child and run no Ruby there; Process.daemon
  # does not go through it either, and needs nothing: the parent exits at once, so the daemon is
  # the reactor's only owner and carries on with it.
  module ForkHandler
    # How /proc/self/fd names a pidfd (the first form up to Linux 6.8, the second with pidfs).
    PIDFD = /\A(?:anon_inode:\[pidfd\]|pidfd:)/.freeze

    # Process waits in flight in this process, in any reactor (see .waiting_for_process).
    @process_waits = 0
    # Forks this process is removed from the one that loaded Weft (see .generation).
    @generation = 0
    @lock = Thread::Mutex.new

    # @return [Integer] the child's pid in the parent, 0 in the child
    def _fork
      pid = super
      if pid.zero?
        ForkHandler.forked
        ForkHandler.close_inherited_pidfds if ForkHandler.process_waits.positive?
        scheduler = Fiber.scheduler
        scheduler.process_fork if scheduler.is_a?(Scheduler)
      end
      pid
    end

    class << self
      # @return [Integer] how many Process.waits are in flight in this process's reactors
      attr_reader :process_waits

      # Changes in the child of every fork, so that an object can tell it was inherited across
      # one by comparing this with the value it saw when it was made. Process.pid is a system
      # call on glibc 2.25 and newer (it no longer caches the pid), a few microseconds each on a
      # virtualised machine: too much for a check on every statement (Weft::Postgres::Pool).
      # A child made by fork(2) from C, bypassing Process._fork, is not seen.
      # @return [Integer]
      attr_reader :generation

      # Called in the child of a fork.
      def forked
        @generation += 1
      end

      # Counts the block (a reactor's Process.wait, during which io-event holds a pidfd) as a
      # process wait in flight, so that a child forked meanwhile knows it has pidfds to close,
      # and one forked when there are none need not look (about 5 us per open descriptor).
      def waiting_for_process
        @lock.synchronize { @process_waits += 1 }
        begin
          yield
        ensure
          @lock.synchronize { @process_waits -= 1 }
        end
      end
    end

    # Closes the child's copies of the pidfds that io-event opened for Process.wait in the
    # parent's reactors. While a copy is open, the parent's epoll registration for that pidfd
    # survives the parent closing its own descriptor (an epoll registration lasts as long as any
    # descriptor of the file does), and keeps reporting the exited process under a descriptor
    # number the parent may have reused for the next wait: that wait would wake at once, and the
    # reactor would spin. The child has no use for them (io-event's own, never Ruby IO objects).
    # Linux only, like pidfds; elsewhere there is no /proc/self/fd and nothing to do.
    def self.close_inherited_pidfds
      Dir.each_child("/proc/self/fd") do |name|
        next unless PIDFD.match?(File.readlink("/proc/self/fd/#{name}"))
        IO.for_fd(Integer(name), autoclose: true).close
      rescue SystemCallError
        next # the listing's own descriptor, gone by now
      end
    rescue SystemCallError
      nil # no /proc
    end
  end
end

Process.singleton_class.prepend(Weft::ForkHandler)
