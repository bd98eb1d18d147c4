# frozen_string_literal: true

# Loads the bundle of the Ruby running the benchmark: Gemfile (Gemfile.lock) on Ruby 3.1,
# Gemfile.ruby-3.3 (Gemfile.ruby-3.3.lock) on 3.3 (gemfiles/ruby.rb). So a benchmark runs as
# `ruby bench/...` or `bundle exec ruby bench/...` on either Ruby, and the servers and clients it
# starts inherit the choice (BUNDLE_GEMFILE). A script that runs another checkout gives it
# WeftGemfile.for_ruby(checkout).
require_relative "../../gemfiles/ruby"

ENV["BUNDLE_GEMFILE"] ||= WeftGemfile.for_ruby(File.expand_path("../..", __dir__))
require "bundler/setup"
