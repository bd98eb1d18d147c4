# frozen_string_literal: true

module Weft
  # Keeps options that were renamed working under their old names for a while. The value moves
  # to the new name, and the first use of each old name in the process warns, naming the new
  # one. The warning is of Ruby's :deprecated category, so, like Ruby's own deprecations, it is
  # shown only where deprecation warnings are on (`ruby -W:deprecated`, `Warning[:deprecated] =
  # true`, or a test runner that turns them on, as minitest does).
  #
  #   RENAMED = { timeout: :acquire_timeout }.freeze
  #   options = Weft::RenamedOptions.rename("Weft::Pool.new", options, RENAMED)
  #
  # Core: every component that renames an option uses this, so the warnings read alike.
  module RenamedOptions
    # Weft's lib/ directory: the caller named in a warning is the first frame outside it.
    LIBRARY = "#{File.expand_path('..', __dir__)}/"

    @warned = {}
    @lock = Thread::Mutex.new
    private_constant :LIBRARY

    class << self
      # @param owner [String] the method taking the options, named in the warning
      #   ("Weft::Pool.new")
      # @param options [Hash{Symbol => Object}] keyword options as the caller gave them
      # @param renames [Hash{Symbol => Symbol}] old name => new name
      # @return [Hash] the options under their new names (the Hash given, when it holds no old
      #   name)
      # @raise [ArgumentError] when an option is given under both its names
      def rename(owner, options, renames)
        return options unless renames.any? { |old, _new| options.key?(old) }
        renamed = options.dup
        renames.each do |old, new|
          next unless renamed.key?(old)
          raise ArgumentError, "#{owner}: give #{new}: or its old name #{old}:, not both" if renamed.key?(new)
          warn_once(owner, old, new)
          renamed[new] = renamed.delete(old)
        end
        renamed
      end

      # Warns that `old` is now called `new`, the first time `owner` is given `old` in this
      # process; later uses are silent, so a call in a loop does not flood the log.
      # @return [nil]
      def warn_once(owner, old, new)
        return unless Warning[:deprecated]
        key = [owner, old]
        first = @lock.synchronize { !@warned.key?(key) && (@warned[key] = true) }
        return unless first
        Kernel.warn("#{caller_outside_weft}: #{owner}: option #{old}: is deprecated, use #{new}: instead",
                    category: :deprecated)
        nil
      end

      private

      # @return [String] "file:line" of the application code that gave the old option
      def caller_outside_weft
        location = caller_locations(2).find { |frame| !frame.absolute_path.to_s.start_with?(LIBRARY) }
        location ? "#{location.path}:#{location.lineno}" : "weft"
      end
    end
  end
end
