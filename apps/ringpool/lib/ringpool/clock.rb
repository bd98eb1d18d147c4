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

    # Seconds formatted lately: "2024-05-01T12:01:00." by the second since the epoch. A batch's
    # lockout ends fall in few seconds, and building a Time and formatting it cost more than
    # the rest of an item's answer (apps/ringpool/bench/cpu_profile.rb). Emptied when full;
    # entries are never wrong, so threads sharing it (Puma) need no lock.
    SECOND_PREFIXES_LIMIT = 4_096
    @second_prefixes = {}

    # @param microseconds [Integer]
    # @return [String] ISO 8601 in UTC with microseconds, which PostgreSQL parses as timestamptz
    #   ("2024-05-01T12:01:00.000000Z", Time#iso8601(6)'s form)
    def self.iso8601(microseconds)
      # One string made: divmod's pair, the digits and their padding would be three more.
      format("%s%06dZ", second_prefix(microseconds / 1_000_000), microseconds % 1_000_000)
    end

    # @return [String] the ISO 8601 of a whole second up to its decimal point
    def self.second_prefix(seconds)
      prefixes = @second_prefixes
      prefix = prefixes[seconds]
      return prefix if prefix
      prefixes = @second_prefixes = {} if prefixes.size >= SECOND_PREFIXES_LIMIT
      prefixes[seconds] = Time.at(seconds).utc.strftime("%Y-%m-%dT%H:%M:%S.").freeze
    end
    private_class_method :second_prefix

    # The instants #parse accepts: years 1 to 9999 in UTC, which #iso8601 writes in four digits
    # and PostgreSQL reads (it has no year 0, and "0000-01-01" was an error from the database).
    PARSE_RANGE = ((Time.utc(1).to_r * 1_000_000).to_i...(Time.utc(10_000).to_r * 1_000_000).to_i)

    # @param text [String] an ISO 8601 / RFC 3339 timestamp with a zone
    # @return [Integer, nil] microseconds since the epoch, nil when `text` is not one, or falls
    #   outside PARSE_RANGE
    def self.parse(text)
      return nil unless text.is_a?(String) && text.valid_encoding?
      match = /\A(\d{4})-(\d\d)-(\d\d)T\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:?\d\d)\z/.match(text) or return nil
      # Time.iso8601 rolls a day the month does not have over into the next ("02-30" is 03-01).
      return nil unless Date.valid_date?(Integer(match[1], 10), Integer(match[2], 10), Integer(match[3], 10))
      time = Time.iso8601(text)
      microseconds = (time.to_r * 1_000_000).floor
      microseconds if PARSE_RANGE.cover?(microseconds)
    rescue ArgumentError
      nil
    end
  end
end
