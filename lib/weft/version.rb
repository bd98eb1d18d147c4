# frozen_string_literal: true

module Weft
  VERSION = "0.1.0"
end
