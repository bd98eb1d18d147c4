# frozen_string_literal: true

require "rack/handler"
require "weft/server/rack_handler"

module Rack
  module Handler
    # `rackup -s weft` with Rack 2 (where the handlers live in Rack itself).
    Weft = ::Weft::Server::RackHandler
    register :weft, Weft
  end
end
