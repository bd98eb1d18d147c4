# frozen_string_literal: true

require_relative "../../weft"

module Weft
  module Postgres
    # Runs the pool's cleanup after an interrupted statement (a cancel request to the server, then
    # reading what the statement still sends) without making the interrupted caller wait for it.
    # A cancel request opens a connection of its own to the server and waits for the server to
    # act on it: tens of milliseconds on a busy machine, which a caller whose deadline just passed
    # should not spend.
    #
    # Inside a Weft reactor the work runs in a detached task (so the deadline of the caller, which
    # has passed, does not apply to it, and Weft.run returns only once it is done); elsewhere on a
    # thread of its own.
    module Background
      # @param name [String] for task listings and thread dumps
      # @yield the work; it must handle its own errors
      # @return [Weft::Task, Thread]
      def self.run(name, &work)
        return Weft.spawn(name: name, detached: true, &work) if Weft.running?

        thread = Thread.new(&work)
        thread.name = name
        thread
      end
    end
  end
end
