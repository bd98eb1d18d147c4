# frozen_string_literal: true

require "rbconfig"

module Weft
  # Finds and loads Weft's C extensions (ext/), for their Ruby loaders.
  #
  # In a checkout, `rake compile` puts each build in a folder named for the Ruby that built it
  # (lib/weft/http1/ruby-3.3.0/weft_http1.so), so one checkout holds a build per Ruby and a Ruby
  # never loads another's: an extension built against another libruby does not fail to load, it
  # crashes the process at its first call. A gem installed by RubyGems has one build, beside
  # its loader, made by the Ruby that installed it (RubyGems keeps one gem folder per Ruby).
  module NativeExtension
    # The folder, beside an extension's loader, of the running Ruby's builds: engine and ABI
    # version (RbConfig's ruby_version: "3.3.0" for every 3.3.x release).
    FOLDER = "#{RUBY_ENGINE}-#{RbConfig::CONFIG['ruby_version']}"

    # Requires the extension NAME that lives beside the loader in DIR: the running Ruby's
    # build in DIR/FOLDER if there is one, else DIR/NAME (an installed gem's).
    #
    # @param dir [String] the loader's folder (its `__dir__`)
    # @param name [String] the extension's name without suffix ("weft_http1")
    # @return [Boolean] what Kernel#require returns
    # @raise [LoadError] when neither is there, saying how to build it
    def self.require(dir, name)
      built = File.join(dir, FOLDER, "#{name}.#{RbConfig::CONFIG['DLEXT']}")
      return Kernel.require(built) if File.exist?(built)

      begin
        Kernel.require(File.join(dir, name))
      rescue LoadError => e
        raise LoadError, "Weft's C extension #{name} is not built for #{RUBY_ENGINE} " \
                         "#{RUBY_VERSION} (looked for #{built}): run `bundle exec rake compile` " \
                         "with this Ruby (#{e.message})"
      end
    end
  end
end
