# frozen_string_literal: true

module Ringpool
  # Phone numbers in E.164: a plus sign, a country code that does not start with 0, and at most
  # 15 digits in all ("+14155550123"). Numbers are stored and compared in this form only, so the
  # exclusion constraint and attribution lookups never see two spellings of one number.
  module E164
    FORMAT = /\A\+[1-9][0-9]{1,14}\z/

    # @return [Boolean] whether `value` is a String in E.164 form (one of invalid UTF-8, say from a
    #   query string's percent-encoding, is not: matching it would raise)
    def self.valid?(value)
      value.is_a?(String) && value.valid_encoding? && FORMAT.match?(value)
    end
  end
end
