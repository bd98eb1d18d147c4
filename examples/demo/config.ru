# frozen_string_literal: true

# examples/demo/run runs this with `weft serve examples/demo/config.ru --stats-path /stats --metrics-path /metrics`.
require_relative "app"

use Rack::ContentLength
run DemoApp.new
