# frozen_string_literal: true

module Bench
  # Where a benchmark writes its page: bench/results/NAME.md on Ruby 3.1 (the Ruby the
  # committed history was measured on), bench/results/NAME-ruby-X.Y.md on any other Ruby, the
  # convention server.md and server-profile.md set. Each page links to its sibling, so a reader
  # finds the other Ruby's figures from either.
  module Results
    DIR = File.expand_path("../results", __dir__)
    BASE_RUBY = "3.1"
    OTHER_RUBY = "3.3"

    module_function

    # @return [String] "" on Ruby 3.1, "-ruby-3.3" on Ruby 3.3
    def suffix(ruby = RUBY_VERSION[/\A\d+\.\d+/])
      ruby == BASE_RUBY ? "" : "-ruby-#{ruby}"
    end

    # @param name [String] the page's name without suffix or extension, e.g. "core"
    # @return [String] the absolute path of the running Ruby's page
    def path(name, ext = "md")
      File.join(DIR, "#{name}#{suffix}.#{ext}")
    end

    # A line linking to the same page measured on the other Ruby.
    # @return [String]
    def sibling_link(name)
      ruby = RUBY_VERSION.start_with?("#{BASE_RUBY}.") ? OTHER_RUBY : BASE_RUBY
      label = ruby == BASE_RUBY ? "Ruby #{ruby}" : "Ruby #{ruby} + YJIT"
      "The same benchmark on #{label}: [#{name}#{suffix(ruby)}.md](#{name}#{suffix(ruby)}.md)."
    end
  end
end
