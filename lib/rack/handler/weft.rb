# frozen_string_literal: true

require "rack/handler"
require "weft/server/rack_handler"

module Rack
  module Handler
    # `rackup -s weft` with Rack 2 (where the handlers live in Rack itself).
    Weft = ::Weft::Server::RackHandler
    # Rack 2 stores the name and resolves it with const_get from Rack::Handler, where "Weft"
    # is this alias; the module's own name would then resolve wrongly.
    register :weft, "Rack::Handler::Weft"
  end
end
