# frozen_string_literal: true

# The app runs on the gem's own bundle (the repository's Gemfile has Rails 7.2, Puma, Falcon).
ENV["BUNDLE_GEMFILE"] ||= File.expand_path("../../../../../Gemfile", __dir__)
require "bundler/setup"
