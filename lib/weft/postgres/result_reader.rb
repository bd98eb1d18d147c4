# frozen_string_literal: true

require "pg"
require_relative "../native_extension"

module Weft
  module Postgres
    # Takes the results of a pipelined connection that libpq has complete, for Pipeline's
    # reader, one call per read of the socket.
    #
    #   failed = ResultReader::READER.take(raw, results, syncs)
    #
    # appends to the Array `results`, in order: a PG::Result for each result of a statement,
    # nil where a statement's results end, `true` for a sync point (its own result is freed at
    # once: it carries nothing). It stops when libpq would wait for more input, once `syncs`
    # sync points came (nothing is in flight after the last one) or when libpq has nothing
    # queued at all (it then answers "no more results" for ever: two in a row stop it), and
    # returns how many of the
    # PG::Results it appended are not of a statement that ran to its end (an error; a statement
    # skipped after one), so that a reader of a clean read need not ask each result its status.
    #
    # READER is NativeResultReader (C, ext/weft_pg) where it can find `pg`'s and libpq's
    # functions in the `pg` extension loaded, and this module's Ruby reader otherwise, or when
    # WEFT_PG_READER=ruby is set (to compare the two). Both keep the contract above; the C one
    # saves the Ruby calls around libpq's (is_busy, sync_get_result and result_status for every
    # result, a sync point's PG::Result): see bench/results/postgres.md.
    module ResultReader
      # Statuses of a result whose statement ran to its end.
      SUCCEEDED = [PG::PGRES_TUPLES_OK, PG::PGRES_COMMAND_OK, PG::PGRES_EMPTY_QUERY].freeze

      # The Ruby reader: the contract above with `pg`'s methods.
      # @param raw [PG::Connection] in pipeline mode
      # @param results [Array] appended to
      # @param syncs [Integer] sync points in flight
      # @return [Integer] results appended that did not succeed
      def self.take(raw, results, syncs)
        failed = 0
        after_end = false
        while syncs.positive? && !raw.is_busy
          result = raw.sync_get_result
          if result.nil?
            break if after_end # two ends in a row: libpq has nothing in flight
            after_end = true
            results << nil
            next
          end
          after_end = false
          status = result.result_status
          if status == PG::PGRES_PIPELINE_SYNC
            result.clear
            results << true
            syncs -= 1
          else
            failed += 1 unless SUCCEEDED.include?(status)
            results << result
          end
        end
        failed
      end

      # The loaded `pg` extension's file, whose functions (and libpq's) the C reader calls.
      def self.pg_extension
        $LOADED_FEATURES.find { |path| File.basename(path, ".*") == "pg_ext" }
      end

      # @return [Boolean] whether the C reader is found and bound to the loaded `pg` (1.x: the
      #   C functions it calls have kept their signatures through 1.x)
      def self.native?
        return false if ENV["WEFT_PG_READER"] == "ruby" || !PG::VERSION.start_with?("1.")
        NativeExtension.require(__dir__, "weft_pg")
        path = pg_extension
        !path.nil? && NativeResultReader.bind(path, PG::PGRES_PIPELINE_SYNC, SUCCEEDED)
      rescue LoadError
        false # not built (a checkout without `rake compile`): the Ruby reader does the same
      end

      # The reader Pipeline uses: NativeResultReader or ResultReader.
      READER = native? ? NativeResultReader : self
      # What Pipeline sends a named statement without parameters with: NativeSender where the C
      # reader is bound (the same look-up binds it), nil (`pg`'s send_query_prepared) otherwise.
      SENDER = READER.equal?(self) ? nil : NativeSender
    end
  end
end
