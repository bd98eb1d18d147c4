# frozen_string_literal: true

require_relative "../test_helper"
require "open3"
require "rbconfig"
require "tmpdir"

# pg is a dependency of Weft::Postgres only: without it, the rest of Weft loads, and
# `require "weft/postgres"` says what is missing and how to add it.
class PostgresRequirementsTest < Minitest::Test
  def test_without_pg_weft_loads_and_weft_postgres_names_the_missing_gem
    Dir.mktmpdir do |dir|
      # A pg that cannot be loaded, first on the load path: as if the gem were not installed.
      File.write(File.join(dir, "pg.rb"), 'raise LoadError, "cannot load such file -- pg"')
      script = <<~RUBY
        require "weft"
        require "weft/http"
        puts "core and client loaded"
        begin
          require "weft/postgres"
        rescue LoadError => e
          puts e.message
        end
      RUBY
      lib = File.expand_path("../../lib", __dir__)
      output, status = Open3.capture2e(RbConfig.ruby, "-I", dir, "-I", lib, "-e", script)
      assert status.success?, output
      assert_includes output, "core and client loaded"
      assert_match(/Weft::Postgres needs the pg gem .*gem "pg", "~> 1.5"/, output)
    end
  end
end
