# frozen_string_literal: true

require "pg"
require "socket"
require_relative "errors"
require_relative "../timers"
require_relative "../pool"

module Weft
  module Postgres
    # One server connection as the pool keeps it: the PG::Connection plus what the pool needs
    # to know about it (age, last use, owning process, pipeline or plain mode).
    #
    # A connection is in one of two modes. In plain mode it is an ordinary `pg` connection, as
    # handed to `Pool#with`. In pipeline mode libpq's pipeline is on and the connection is
    # nonblocking at the Ruby level too, so sends only buffer and Weft decides when to flush
    # and when to wait; Pipeline drives it.
    class Connection
      # Whether pg has the flag that #buffer_sends sets (pg 1.3 and later).
      FLUSH_DATA = PG::Connection.private_method_defined?(:flush_data=)
      private_constant :FLUSH_DATA

      # @return [PG::Connection]
      attr_reader :raw
      # @return [Float] monotonic time the connection was opened
      attr_reader :opened_at
      # @return [Float] monotonic time the connection was last given back to the pool
      attr_accessor :released_at
      # @return [Integer] the process that opened it
      attr_reader :pid
      # @return [Pipeline, nil] set while the connection is in pipeline mode
      attr_accessor :pipeline
      # @return [Integer] savepoints Pool#transaction(requires_new: true) has open on it now
      attr_accessor :savepoint_depth
      # @return [PreparedStatements, nil] the named statements the pool prepared on it (nil:
      #   the pool prepares none); a new connection starts with none
      attr_accessor :statements

      # Opens a connection; raises ConnectionError naming the server when that fails.
      # @param settings [Settings]
      # @param connector [#call, nil] opens the PG::Connection from the conninfo string instead
      #   of PG.connect (see Pool#initialize)
      # @return [Connection]
      def self.open(settings, connector = nil)
        raw = connector ? connector.call(settings.conninfo) : PG.connect(settings.conninfo)
        new(raw)
      rescue PG::ConnectionBad => e
        raise ConnectionError, "could not connect to PostgreSQL at #{settings.address}: #{e.message.strip}"
      end

      # @param raw [PG::Connection] an open connection
      def initialize(raw)
        @raw = raw
        @pid = Process.pid
        @opened_at = Timers.now
        @age_factor = Weft::Pool.spread_factor
        @released_at = @opened_at
        @pipelined = false
        @pipeline = nil
        @savepoint_depth = 0
        @statements = nil
        @broken = false
      end

      # @return [Boolean] whether libpq's pipeline mode is on
      def pipelined?
        @pipelined
      end

      # Switches to pipeline mode (from idle plain mode): sends only buffer, Pipeline flushes
      # and waits itself.
      def enter_pipeline_mode
        return if @pipelined
        buffer_sends(true)
        @raw.enter_pipeline_mode
        @pipelined = true
      end

      # Switches back to plain mode; the pipeline must be empty. Sends flush again, as users
      # of Pool#with expect from pg.
      def exit_pipeline_mode
        return unless @pipelined
        @raw.exit_pipeline_mode
        buffer_sends(false)
        @pipelined = false
      end

      # Marks the connection unusable; the pool closes it instead of reusing it.
      def broken!
        @broken = true
      end

      # @return [Boolean] whether it was marked unusable
      def broken?
        @broken
      end

      # A cheap check that needs no round trip and never waits: reads whatever the server sent
      # while the connection sat idle (a terminated backend or a server restart leaves an error
      # and end-of-file there) and asks libpq whether the connection is still good.
      # @return [Boolean]
      def usable?
        return false if @broken || @raw.finished?
        io = @raw.socket_io
        loop do
          peeked = io.recv_nonblock(1, Socket::MSG_PEEK, exception: false)
          break if peeked == :wait_readable
          return false if peeked.nil? || peeked.empty? # end of file: the server hung up

          @raw.consume_input
          return false unless @raw.status == PG::CONNECTION_OK
        end
        @raw.status == PG::CONNECTION_OK && @raw.transaction_status == PG::PQTRANS_IDLE
      rescue PG::Error, IOError, SystemCallError
        false
      end

      # @return [Float] seconds since the connection was opened
      def age
        Timers.now - @opened_at
      end

      # @param max_age [Numeric] the pool's max_age
      # @return [Boolean] whether the connection has lived past its own share of `max_age`:
      #   a point between 90% and 100% of it drawn when it opened (Weft::Pool::LIMIT_SPREAD),
      #   so that connections opened together are not all replaced together
      def outlived?(max_age)
        age > max_age * @age_factor
      end

      # @return [Float] seconds since the connection was last given back
      def idle_time
        Timers.now - @released_at
      end

      # Closes the connection politely (libpq sends Terminate).
      def close
        @raw.finish unless @raw.finished?
      rescue PG::Error, IOError, SystemCallError
        nil
      end

      # Lets go of a connection this process inherited across fork without touching the
      # parent's session: the socket is shared with the parent, so saying goodbye on it (or
      # letting the garbage collector's finish do so) would end the parent's connection. The
      # child's copy of the descriptor is pointed at /dev/null first, so libpq's Terminate goes
      # nowhere and closing it only closes the child's copy.
      def forget_inherited
        return if @raw.finished?
        fd = @raw.socket
        if fd && fd >= 0
          File.open(File::NULL, "r+") do |null|
            IO.for_fd(fd, autoclose: false).reopen(null)
          end
        end
        @raw.finish
      rescue PG::Error, IOError, SystemCallError
        nil
      end

      private

      # Makes sends leave their data in libpq's buffer (`true`) or flush it as pg's blocking
      # API does (`false`): pg's flush_data flag, which PG::Connection#setnonblocking sets. That
      # method also re-aliases six methods (flush, pipeline_sync...) on the connection's
      # singleton class on every call, and the pool switches a connection's mode for each
      # lease: every connection got a singleton class, which YJIT compiles no call on (its
      # send_singleton_class fallback: ~60 of a Rails request's calls), and every switch
      # redefined methods. Nothing else setnonblocking does is needed here: libpq itself stays
      # nonblocking under pg's async API, and Pipeline calls the sync_ methods by name.
      def buffer_sends(buffer)
        return @raw.setnonblocking(buffer) unless FLUSH_DATA

        @raw.sync_setnonblocking(true)
        @raw.__send__(:flush_data=, !buffer)
      end
    end
  end
end
