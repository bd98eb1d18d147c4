# frozen_string_literal: true

# Which Gemfile Bundler is to be given (BUNDLE_GEMFILE) under the running Ruby. Bundler names the
# lockfile after the Gemfile, so a Ruby with a lockfile of its own has a Gemfile of its own:
# Gemfile.ruby-X.Y, which evaluates the main Gemfile (whose gems resolve per Ruby). Rubies
# without one use the main Gemfile and its Gemfile.lock (Ruby 3.1's).
#
# Read by the Gemfile (which refuses to be used where another Gemfile belongs), bin/gemfile
# (for the shell scripts) and bench/support/bundle.rb.
module WeftGemfile
  # @param checkout [String] a Weft checkout (an older one may have no Gemfile for this Ruby)
  # @return [String] the path of the Gemfile for the running Ruby in that checkout
  def self.for_ruby(checkout)
    own = File.join(checkout, "Gemfile.ruby-#{RUBY_VERSION[/\A\d+\.\d+/]}")
    File.exist?(own) ? own : File.join(checkout, "Gemfile")
  end
end
