# frozen_string_literal: true

# Loads the gem's test helper (watchdog, the throwaway PostgreSQL cluster) and the app.
require_relative "../../../test/test_helper"
$LOAD_PATH.unshift(File.expand_path("../lib", __dir__))
require "ringpool"
require_relative "support/ringpool_helpers"
