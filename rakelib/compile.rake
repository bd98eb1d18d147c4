# frozen_string_literal: true

require "rbconfig"
require "fileutils"

# Builds each C extension out of tree (tmp/ext/NAME/<ruby version>) and copies the shared
# object into the running Ruby's folder beside its Ruby loader (lib/weft/http1/ruby-3.1.0/...,
# Weft::NativeExtension::FOLDER), where that loader looks for it: one checkout keeps a build
# per Ruby, and no Ruby loads another's (a crash, not an error). A build directory per Ruby
# too: make would otherwise relink one Ruby's object files for another.
# `rake -f rakelib/compile.rake` loads this file and then rake also autoloads
# rakelib/*.rake: define the tasks once only.
unless Rake::Task.task_defined?("weft_http1:build")
  root = File.expand_path("..", __dir__)
  require File.join(root, "lib/weft/native_extension")
  dlext = RbConfig::CONFIG["DLEXT"]
  # extension => the directory under lib/ its loader requires it from
  extensions = {
    "weft_http1" => "lib/weft/http1", # the HTTP/1.1 parser (lib/weft/http1/parser.rb)
    "weft_readiness" => "lib/weft",   # Weft::Readiness (lib/weft/readiness.rb)
    "weft_pg" => "lib/weft/postgres" # the pipeline's result reader (lib/weft/postgres/result_reader.rb)
  }

  extensions.each do |name, lib_dir|
    namespace name do
      build_dir = File.join(root, "tmp/ext", name, "#{RUBY_ENGINE}-#{RUBY_VERSION}-#{RbConfig::CONFIG['arch']}")
      target = File.join(root, lib_dir, Weft::NativeExtension::FOLDER, "#{name}.#{dlext}")
      # Where builds went before there was a folder per Ruby: whichever Ruby built it last.
      unversioned = File.join(root, lib_dir, "#{name}.#{dlext}")

      task :build do
        FileUtils.mkdir_p(build_dir)
        Dir.chdir(build_dir) do
          sh RbConfig.ruby, File.join(root, "ext", name, "extconf.rb")
          sh "make", "-j4"
        end
        # Copied beside the target and renamed over it: a new file, not the old one rewritten,
        # so a server running from this checkout keeps the library it mapped instead of
        # crashing on code changed under it.
        FileUtils.mkdir_p(File.dirname(target))
        FileUtils.cp(File.join(build_dir, "#{name}.#{dlext}"), "#{target}.tmp")
        File.rename("#{target}.tmp", target)
        FileUtils.rm_f(unversioned) # or another Ruby, finding no build of its own, would load it
        puts "built #{target}"
      end

      task :clean do
        FileUtils.rm_rf(File.dirname(build_dir))
        FileUtils.rm_f([target, unversioned])
      end
    end
  end

  desc "Compile the C extensions"
  task compile: extensions.keys.map { |name| "#{name}:build" }
end
