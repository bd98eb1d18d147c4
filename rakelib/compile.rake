# frozen_string_literal: true

require "rbconfig"
require "fileutils"

# Builds ext/weft_http1 out of tree (tmp/ext/weft_http1/<ruby version>) and copies the shared
# object next to its Ruby loader, lib/weft/http1/weft_http1.<dlext>. A build directory per Ruby:
# make would otherwise relink one Ruby's object files for another (a crash, not an error).
# `rake -f rakelib/compile.rake` loads this file and then rake also autoloads
# rakelib/*.rake: define the tasks once only.
unless Rake::Task.task_defined?("weft_http1:build")
namespace :weft_http1 do
  root = File.expand_path("..", __dir__)
  build_dir = File.join(root, "tmp/ext/weft_http1", "#{RUBY_ENGINE}-#{RUBY_VERSION}-#{RbConfig::CONFIG['arch']}")
  ext_dir = File.join(root, "ext/weft_http1")
  dlext = RbConfig::CONFIG["DLEXT"]
  target = File.join(root, "lib/weft/http1/weft_http1.#{dlext}")

  task :build do
    FileUtils.mkdir_p(build_dir)
    Dir.chdir(build_dir) do
      sh RbConfig.ruby, File.join(ext_dir, "extconf.rb")
      sh "make", "-j4"
    end
    FileUtils.cp(File.join(build_dir, "weft_http1.#{dlext}"), target)
    puts "built #{target}"
  end

  task :clean do
    FileUtils.rm_rf(File.dirname(build_dir))
    FileUtils.rm_f(target)
  end
end

desc "Compile the C extensions"
task compile: "weft_http1:build"
end
