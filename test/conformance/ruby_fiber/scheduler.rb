# frozen_string_literal: true

# Stands in for test/fiber/scheduler.rb of Ruby's own test suite, so that Ruby's fiber scheduler
# tests run against Weft's scheduler instead of Ruby's reference one (see ./run). It defines the
# classes those tests use, as thin subclasses of Weft::Scheduler; only what the tests ask of the
# reference scheduler beyond the Fiber::Scheduler interface is added here.
require "io/nonblock" # the reference scheduler loads it, and the tests rely on it
require "logger"
require "weft"

# Task failures are raised from #run and #close below instead of being logged.
Weft.logger = Logger.new(nil)

class Scheduler < Weft::Scheduler
  # test_scheduler asserts that Ruby closed the scheduler.
  def closed?
    @closed
  end

  # test_sleep counts the fibers parked in a wait.
  def waiting
    @suspended
  end

  # Weft keeps a task's exception in the task (and logs it if nothing waits for it). Ruby's
  # reference scheduler lets it escape from #run and #close, which is where the tests expect
  # assertion failures made inside Fiber.schedule blocks: do the same.
  def fiber(&block)
    super do |*args|
      block.call(*args)
    rescue Exception => e # rubocop:disable Lint/RescueException
      (@escaped ||= []) << e
      raise
    end
  end

  def run
    super
    raise_escaped
  end

  def close
    super
  ensure
    raise_escaped
  end

  private

  def raise_escaped
    raise @escaped.shift if @escaped&.any?
  end
end

# The reference scheduler's IO::Buffer hooks; Weft has io_read/io_write of its own with io_uring
# (Weft::SelectorIO), and with epoll leaves reads and writes to Ruby, which waits through io_wait.
class IOBufferScheduler < Scheduler
end

# Ruby's tests of how Ruby copes with a scheduler whose #unblock misbehaves.
class BrokenUnblockScheduler < Scheduler
  def unblock(blocker, fiber)
    super
    raise "Broken unblock!"
  end
end

class SleepingUnblockScheduler < Scheduler
  def unblock(blocker, fiber)
    super
    sleep(0.1)
  end
end
