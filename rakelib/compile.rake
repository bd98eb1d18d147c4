# frozen_string_literal: true

require "rbconfig"
require "fileutils"

# Builds each C extension out of tree (tmp/ext/NAME/<ruby version>) and copies the shared
# object next to its Ruby loader. A build directory per Ruby: make would otherwise relink one
# Ruby's object files for another (a crash, not an error).
# `rake -f rakelib/compile.rake` loads this file and then rake also autoloads
# rakelib/*.rake: define the tasks once only.
unless Rake::Task.task_defined?("weft_http1:build")
  root = File.expand_path("..", __dir__)
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
      target = File.join(root, lib_dir, "#{name}.#{dlext}")

      task :build do
        FileUtils.mkdir_p(build_dir)
        Dir.chdir(build_dir) do
          sh RbConfig.ruby, File.join(root, "ext", name, "extconf.rb")
          sh "make", "-j4"
        end
        # Copied beside the target and renamed over it: a new file, not the old one rewritten,
        # so a server running from this checkout keeps the library it mapped instead of
        # crashing on code changed under it.
        FileUtils.cp(File.join(build_dir, "#{name}.#{dlext}"), "#{target}.tmp")
        File.rename("#{target}.tmp", target)
        puts "built #{target}"
      end

      task :clean do
        FileUtils.rm_rf(File.dirname(build_dir))
        FileUtils.rm_f(target)
      end
    end
  end

  desc "Compile the C extensions"
  task compile: extensions.keys.map { |name| "#{name}:build" }
end
