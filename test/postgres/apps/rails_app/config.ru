# frozen_string_literal: true

# `weft serve`, `puma` and `falcon serve` all start the app from here.
require_relative "config/environment"

run Rails.application
