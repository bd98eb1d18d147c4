# frozen_string_literal: true

# The app runs on the bundle it is given (BUNDLE_GEMFILE: bin/test's Rails 7.1 step names
# gemfiles/rails71.gemfile), else the gem's own bundle for the Ruby in use (Rails 7.2 on Ruby 3.1, 8.1 on 3.3;
# Puma and Falcon too): Gemfile or Gemfile.ruby-3.3, see gemfiles/ruby.rb.
require_relative "../../../../../gemfiles/ruby"

ENV["BUNDLE_GEMFILE"] ||= WeftGemfile.for_ruby(File.expand_path("../../../../..", __dir__))
require "bundler/setup"
