# frozen_string_literal: true

require "time"

module Ringpool
  # Wall-clock time as integer microseconds since the epoch: PostgreSQL's timestamptz has
  # microsecond resolution, so a lockout end computed here and one read back from the table
  # compare exactly (floats would not).
  module Clock
    # @return [Integer] microseconds since the epoch, now
    def self.now
      Process.clock_gettime(Process::CLOCK_REALTIME, :microsecond)
    end

    # @param microseconds [Integer]
    # @return [String] ISO 8601 in UTC with microseconds, which PostgreSQL parses as timestamptz
    def self.iso8601(microseconds)
      Time.at(microseconds / 1_000_000, microseconds % 1_000_000, :usec).utc.iso8601(6)
    end

    # @param text [String] an ISO 8601 / RFC 3339 timestamp with a zone
    # @return [Integer, nil] microseconds since the epoch, nil when `text` is not one
    def self.parse(text)
      return nil unless text.is_a?(String) && text.match?(/\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:?\d\d)\z/)
      time = Time.iso8601(text)
      (time.to_r * 1_000_000).floor
    rescue ArgumentError
      nil
    end
  end
end
