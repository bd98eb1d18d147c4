# frozen_string_literal: true

require_relative "test_helper"
require "tmpdir"
require "weft/native_extension"
require "weft/http1/parser"
require "weft/readiness"
require "weft/postgres"

# Weft::NativeExtension: a Ruby loads its own build of each C extension, falls back to an
# installed gem's single build, and never loads a build folder made by another Ruby (in one
# checkout used by two Rubies, that was a segfault at the first call into the extension).
class NativeExtensionTest < Minitest::Test
  LIB = File.expand_path("../lib", __dir__)

  def test_a_checkout_loads_the_running_rubys_builds
    assert Weft::Postgres::ResultReader.native?, "weft_pg's build for this Ruby should load"
    %w[http1/weft_http1 weft_readiness postgres/weft_pg].each do |path|
      dir, name = File.split(File.join(LIB, "weft", path))
      expected = File.join(dir, Weft::NativeExtension::FOLDER, "#{name}.#{RbConfig::CONFIG['DLEXT']}")
      assert_includes $LOADED_FEATURES, expected
    end
  end

  def test_the_folder_names_the_engine_and_its_abi_version
    assert_equal "#{RUBY_ENGINE}-#{RbConfig::CONFIG['ruby_version']}", Weft::NativeExtension::FOLDER
  end

  # An installed gem has no build folder: its one build sits beside the loader. Another Ruby's
  # build folder beside it is not looked into.
  def test_without_a_build_for_this_ruby_the_build_beside_the_loader_is_loaded
    Dir.mktmpdir do |dir|
      other = File.join(dir, "#{RUBY_ENGINE}-0.0.0")
      Dir.mkdir(other)
      File.write(File.join(other, "weft_probe.#{RbConfig::CONFIG['DLEXT']}"), "not a shared object")
      File.write(File.join(dir, "weft_probe.rb"), "$weft_probe_loaded = __FILE__\n")
      assert Weft::NativeExtension.require(dir, "weft_probe")
      assert_equal File.join(dir, "weft_probe.rb"), $weft_probe_loaded
    ensure
      $weft_probe_loaded = nil
    end
  end

  def test_a_missing_build_raises_load_error_saying_how_to_build_it
    Dir.mktmpdir do |dir|
      Dir.mkdir(File.join(dir, "#{RUBY_ENGINE}-0.0.0"))
      error = assert_raises(LoadError) { Weft::NativeExtension.require(dir, "weft_absent") }
      assert_includes error.message, "weft_absent is not built for #{RUBY_ENGINE} #{RUBY_VERSION}"
      assert_includes error.message, "rake compile"
      assert_includes error.message, File.join(dir, Weft::NativeExtension::FOLDER)
    end
  end
end
