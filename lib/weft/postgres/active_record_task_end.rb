# frozen_string_literal: true

require "active_record"
require "active_support/isolated_execution_state"
require_relative "../../weft"

module Weft
  module Postgres
    # Gives back, as each Weft task ends, the ActiveRecord connections the task left checked out
    # with its fiber, in every pool (every connection handler, role and shard).
    #
    # With isolation_level :fiber, ActiveRecord's ConnectionPool keeps a leased connection with
    # the Fiber that leased it (Rails 7.1: any model query outside with_connection; 7.2 and 8.1:
    # lease_connection and the deprecated connection) and takes it back only when that fiber is
    # dead (the reaper). Weft runs task after task in one pooled fiber, so the connection passed
    # to the next task there, with its session (a SET) and an open transaction (execute("BEGIN")),
    # and it stayed out of the pool while the fiber waited idle. Here it goes back as the task
    # ends, as the reaper gives back a dead fiber's connection: reset (rolled back, its session
    # cleared and set up again: with `adapter: postgresql` ActiveRecord's reset!, ROLLBACK if
    # needed, DISCARD ALL and the session settings, keeping the adapter's type map (see
    # KeptTypeMap); the weft_postgresql adapter gives back the PostgreSQL connection it held, if
    # any, and makes no round trip of its own) and checked in.
    #
    # A task that holds nothing at its end costs a fiber-local read: only tasks that checked a
    # connection out (with_connection included) are looked at, and only in those pools. A
    # connection the ending fiber does not own is left alone: the one transactional tests share
    # among fibers (lock_thread, Rails 7.2's pinned connection), and with isolation_level
    # :thread the thread's. In a Rails app, the executor gives connections back at the end of
    # each request already, and this finds nothing.
    #
    # Installed by the weft_postgresql adapter and by `require "weft/postgres/active_record"`.
    module ActiveRecordTaskEnd
      # The fiber-local (Thread#[]) where a task notes the pools it checked out from.
      POOLS = :weft_active_record_pools
      private_constant :POOLS

      # Prepended to ActiveRecord's ConnectionPool: notes the pool for the current task's end.
      module CheckoutNote
        # ActiveRecord's checkout (called by lease_connection, connection and with_connection
        # alike), noting this pool in the current task.
        def checkout(*args)
          connection = super(*args)
          ActiveRecordTaskEnd.checked_out(self)
          connection
        end
      end

      # Prepended to ActiveRecord's PostgreSQLAdapter: an adapter reset as its task ends keeps
      # its type map instead of building it again. ActiveRecord's reset! reconfigures the
      # adapter as if newly connected, and most of that is the type map (PostgreSQL types by
      # OID to ActiveRecord types) loaded anew, three catalog queries and the map built from
      # them: 2.4 of 3.6 ms of CPU per reset (Rails 7.2, Ruby 3.1; bench/postgres/task_end_bench.rb).
      # It describes the database's types, which neither ROLLBACK nor DISCARD ALL changes, and
      # lives in the adapter object, which stays; a schema change that adds types rebuilds it as
      # it is made (enable_extension, create_enum...). Everything else reset! does (the session
      # settings, the time zone, the result decoders) it still does.
      module KeptTypeMap
        # ActiveRecord's #reset!, keeping the adapter's type map if it has one.
        # @return [void]
        def reset_keeping_type_map!
          return reset! unless @type_map
          @weft_keeping_type_map = true
          begin
            reset!
          ensure
            @weft_keeping_type_map = false
          end
        end

        # ActiveRecord's, but not during #reset_keeping_type_map!.
        def reload_type_map
          super unless @weft_keeping_type_map
        end
      end

      class << self
        # Hooks into ActiveRecord's pools and Weft's task ends; once per process.
        # @return [void]
        def install
          return if @installed
          @installed = true
          ActiveRecord::ConnectionAdapters::ConnectionPool.prepend(CheckoutNote)
          ActiveSupport.on_load(:active_record_postgresqladapter) { prepend(KeptTypeMap) }
          Weft::Task.on_end { give_back }
        end

        # @api private: notes that the current task checked a connection out of `pool`
        def checked_out(pool)
          return unless Weft::Task.current
          (Thread.current[POOLS] ||= {}.compare_by_identity)[pool] = true
        end

        # Gives back what the current (ending) task holds in the pools it checked out from.
        # @return [void]
        def give_back
          locals = Thread.current
          return unless (pools = locals[POOLS])
          locals[POOLS] = nil
          context = ActiveSupport::IsolatedExecutionState.context
          # With isolation_level :thread a lease is the thread's, shared by all its tasks.
          return unless context.equal?(Fiber.current)
          pools.each_key { |pool| give_back_from(pool, context) }
        end

        private

        def give_back_from(pool, context)
          connection = pool.active_connection?
          return unless connection && connection.owner.equal?(context)
          return if connection.respond_to?(:pinned) && connection.pinned
          reset(connection)
          pool.release_connection
        end

        # Clears what the task left in the connection's session, as the reaper does before it
        # checks a dead owner's connection in (#reset!), or as the adapter knows to do more
        # cheaply (`reset_for_next_task!`: the weft_postgresql adapter's;
        # `reset_keeping_type_map!`: ActiveRecord's PostgreSQL adapter, see KeptTypeMap). A connection that
        # cannot be reset is disconnected: ActiveRecord reconnects it at its next use.
        def reset(connection)
          if connection.respond_to?(:reset_for_next_task!)
            connection.reset_for_next_task!
          elsif connection.respond_to?(:reset_keeping_type_map!)
            connection.reset_keeping_type_map!
          else
            connection.reset!
          end
        rescue StandardError => e
          Weft.logger.warn("ActiveRecord connection left by a task could not be reset (#{e.class}: #{e.message}); disconnecting it")
          begin
            connection.disconnect!
          rescue StandardError
            nil
          end
        end
      end
    end
  end
end
