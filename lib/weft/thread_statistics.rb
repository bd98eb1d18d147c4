# frozen_string_literal: true

require_relative "fork_handler"

module Weft
  # How a thread of this process has spent its time as Linux's scheduler counts it (the
  # per-thread schedstat file in /proc): seconds on a core, and seconds runnable but waiting for
  # one. The second is the machine's load as that thread feels it, which no clock of the
  # thread's own can tell from its own work; the postgres pool (Postgres::CoreWait) and the
  # server's stall detector (Server::StallDetector) both read it, each for its own judgement.
  #
  # A reading opens, reads and closes the file (16-20 µs of CPU here, with the parse); a reader
  # that keeps the file open (#keep_open) reads it with one pread (3.8-5.5 µs), for a thread read
  # many times a second (bench/core/schedstat_read.rb).
  # A file kept open goes on naming the thread it was opened for, in a forked child too, where
  # that thread is the parent's: there the reader drops it and reads by name again (the
  # parent's threads are not the child's: nil on Ruby 3.1; on Ruby 3.3 the thread that forked
  # takes the child's id, and its figures are the child's).
  #
  # Where Linux keeps no such statistics (another operating system, a kernel built without
  # them) or the thread has ended, a reading is nil.
  class ThreadStatistics
    # The statistics of the thread that reads it (/proc/thread-self names the thread that opens
    # it, whichever that is).
    CALLING_THREAD = "/proc/thread-self/schedstat"
    # Bytes enough for the file's one line: three counters of up to 20 digits, two spaces, a
    # newline.
    LINE = 64

    # Reads the calling thread's statistics once.
    # @return [Array(Float, Float), nil] seconds on a core and seconds waiting for one since the
    #   thread started; nil where not kept
    def self.calling_thread
      parse(File.read(CALLING_THREAD, LINE))
    rescue SystemCallError, IOError
      nil
    end

    # @param text [String, nil] a schedstat file's line: nanoseconds on a core, nanoseconds
    #   waiting for one, timeslices (nil: an empty file)
    # @return [Array(Float, Float), nil] the first two in seconds; nil for anything else
    def self.parse(text)
      ran, waited = text&.split(" ", 3)
      [Integer(ran) / 1e9, Integer(waited) / 1e9]
    rescue ArgumentError, TypeError
      nil
    end

    # @param thread [Thread] a thread of this process, read from any thread
    def initialize(thread)
      @thread = thread
      @file = nil
      @generation = nil # ForkHandler.generation when @file was opened
    end

    # Opens the thread's file for the readings to come (read by any thread: a pread leaves no
    # position behind), until #close.
    # @return [self]
    def keep_open
      close
      @file = File.open(path)
      @generation = ForkHandler.generation
      self
    rescue SystemCallError
      self # not kept: #read reads by name, and finds nothing either
    end

    # Reads the thread's statistics: from the file kept open, else opened for this reading.
    # @return [Array(Float, Float), nil] seconds on a core and seconds waiting for one since the
    #   thread started; nil where not kept, or the thread has ended
    def read
      close if @file && @generation != ForkHandler.generation # inherited across a fork
      file = @file
      ThreadStatistics.parse(file ? file.pread(LINE, 0) : File.read(path, LINE))
    rescue SystemCallError, IOError
      nil
    end

    # Closes the file kept open, if any (a reading then opens it anew).
    # @return [nil]
    def close
      file = @file
      @file = nil
      file&.close
      nil
    end

    private

    # Named by the thread's id now, not when the reader was made: the thread that forked has a
    # new one in the child on Ruby 3.3.
    def path
      "/proc/self/task/#{@thread.native_thread_id}/schedstat"
    end
  end
end
