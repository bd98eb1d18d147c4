# frozen_string_literal: true

require "rackup/handler"
require "weft/server/rack_handler"

module Rackup
  module Handler
    # `rackup -s weft` (rackup 2 / Rack 3) and `rails server -u weft`.
    Weft = ::Weft::Server::RackHandler
    register :weft, Weft
  end
end
