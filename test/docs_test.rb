# frozen_string_literal: true

require "test_helper"
require "ripper"
require "set"

module Weft
  module Test
    # Finds the public definitions in Ruby source that have no comment right above them: every
    # class and module (at one of its definition sites at least, since `module Weft` is reopened
    # in every file), every public instance and singleton method, every public attr_* and every
    # `Name = Struct.new / Data.define / Class.new` constant. Reads the source with Ripper, so it
    # needs no gem and loads nothing.
    #
    # Counted as not public, so exempt: methods after a bare `private` / `protected` (until
    # `public`), `private def ...`, names given to `private :a, :b` / `private_class_method` /
    # `protected`, `initialize` without parameters (Ruby makes it private; one with parameters
    # is the documentation of `.new`, so it counts) and everything under a constant named in
    # `private_constant`. Methods defined inside a method body, a block or `define_method` are not
    # definitions a reader looks up, and are skipped.
    #
    # "Right above" means the line just before the `def`, `class`, `module`, `attr_*` or
    # constant line is a comment line; a blank line in between breaks the block off.
    #
    # It also lists what the code defines (#definitions, #native_definitions for the C) and what
    # prose names (#references, #paths), so that guides and comments naming a class, method or
    # file that was renamed or removed are found too.
    module DocCoverage
      # One public definition without a comment above it.
      Missing = Struct.new(:file, :line, :name) do
        # @return [String] "file:line name", the way the failure lists it
        def to_s
          "#{file}:#{line} #{name}"
        end
      end

      VISIBILITY_KEYWORDS = %w[private protected public module_function].freeze
      ATTRIBUTE_KEYWORDS = %w[attr_reader attr_writer attr_accessor].freeze
      CONSTANT_BUILDERS = [%w[Struct new], %w[Data define], %w[Class new], %w[Module new]].freeze

      module_function

      # @param sources [Hash{String => String}] Ruby source by file name
      # @return [Array<Missing>] the public definitions in `sources` that have no comment above
      #   them; a namespace is reported once, at its first definition site, and only if none of
      #   its definition sites has a comment
      def missing(sources)
        namespaces = Hash.new { |hash, name| hash[name] = [] }
        found = sources.sort.flat_map { |file, source| scan(source, file, namespaces).missing }
        undocumented_namespaces = namespaces.filter_map do |name, sites|
          next if sites.any? { |site| site[:documented] || site[:private] }
          Missing.new(sites.first[:file], sites.first[:line], name)
        end
        found + undocumented_namespaces
      end

      # @param sources [Hash{String => String}] Ruby source by file name
      # @return [Set<String>] every name the sources define, public or not: "A::B" for classes,
      #   modules and constants, "A::B#name" and "A::B.name" for methods, attributes and aliases
      def definitions(sources)
        sources.each_with_object(Set.new) do |(file, source), names|
          names.merge(scan(source, file).definitions)
        end
      end

      # The classes, modules and methods the C extensions define (rb_define_module,
      # rb_define_class_under, rb_define_method...), named as #definitions names Ruby's.
      # @param sources [Array<String>] C source
      # @return [Set<String>]
      def native_definitions(sources)
        owners = {}
        names = Set.new
        2.times do # a variable may be assigned in one file and used in another, earlier one
          sources.each do |source|
            source.scan(/(\w+)\s*=\s*rb_define_module\("(\w+)"\)/) { |var, name| owners[var] = name }
            source.scan(/(?:(\w+)\s*=\s*)?rb_define_(?:class|module)_under\((\w+),\s*"(\w+)"/) do |var, outer, name|
              next unless owners.key?(outer)
              names << "#{owners[outer]}::#{name}"
              owners[var] = "#{owners[outer]}::#{name}" if var
            end
          end
        end
        names.merge(owners.values)
        sources.each do |source|
          source.scan(/rb_define_(method|singleton_method|module_function)\((\w+),\s*"([^"]+)"/) do |kind, owner, name|
            names << "#{owners[owner]}#{kind == "method" ? "#" : "."}#{name}" if owners.key?(owner)
          end
        end
        names
      end

      # The Weft (and Ringpool) names a guide mentions: `Weft::HTTP::Client`, `Weft.deadline`,
      # `Weft::Task#wait`, `Weft::Pool.new`.
      # @param text [String] Markdown
      # @return [Array<Array(Integer, String)>] line number and name, as written
      def references(text)
        text.each_line.with_index(1).flat_map do |line, number|
          line.scan(/(?<![\w:])((?:Weft|Ringpool)(?:::[A-Z]\w*)*)(?:([.#])([a-z_]\w*[?!=]?))?/).flat_map do |constant, separator, name|
            [[number, constant]] + (name ? [[number, "#{constant}#{separator}#{name}"]] : [])
          end
        end
      end

      # The repository paths a guide mentions (`lib/weft/pool.rb`, `bench/server/profile.rb`),
      # with `{a,b}` expanded; paths with a `*` or `...` are patterns, not names, and are left out.
      # @param text [String] Markdown
      # @return [Array<Array(Integer, String)>] line number and path
      def paths(text)
        # shared/: the folder beside the project (the seeds, the notes), which a clone lacks
        roots = "lib|bench|test|apps|docs|bin|ext|examples|fuzz|gemfiles|exe|rakelib|shared"
        text.each_line.with_index(1).flat_map do |line, number|
          line.scan(/(?<![\w\/.-])((?:#{roots})\/[\w.\/{},*-]*[\w}])/).flat_map do |(path)|
            next [] if path.include?("*") || path.include?("...")
            alternatives = path[/\{([^}]*)\}/, 1]
            expanded = alternatives ? alternatives.split(",").map { |part| path.sub(/\{[^}]*\}/, part) } : [path]
            expanded.map { |one| [number, one] }
          end
        end
      end

      # @param source [String] Ruby source
      # @param file [String] its name in the report
      # @param namespaces [Hash{String => Array<Hash>}] filled with the class and module
      #   definition sites, which are judged across files by #missing
      # @return [Scanner] the walk's findings: #missing (undocumented public methods, attributes
      #   and constants) and #definitions
      def scan(source, file, namespaces = Hash.new { |hash, name| hash[name] = [] })
        tree = Ripper.sexp(source) or raise ArgumentError, "#{file}: Ripper could not parse it"
        scanner = Scanner.new(file, comment_lines(source), namespaces)
        scanner.body(tree[1], [], singleton: false)
        scanner
      end

      # @return [Set<Integer>] numbers of the lines that hold only a comment
      def comment_lines(source)
        lines = source.lines
        Ripper.lex(source).each_with_object(Set.new) do |((line, column), type, _token, _state), found|
          next unless type == :on_comment
          found << line if lines[line - 1][0, column].strip.empty?
        end
      end

      # Walks one file's syntax tree keeping the enclosing namespace and the visibility in force.
      class Scanner
        # @return [Array<Missing>] what the walk found so far
        attr_reader :missing
        # @return [Set<String>] every name defined so far (see DocCoverage.definitions)
        attr_reader :definitions

        # @param file [String] the file's name in the report
        # @param comment_lines [Set<Integer>] the file's comment-only lines
        # @param namespaces [Hash{String => Array<Hash>}] collects class and module sites
        def initialize(file, comment_lines, namespaces)
          @file = file
          @comment_lines = comment_lines
          @namespaces = namespaces
          @missing = []
          @definitions = Set.new
          @private_constants = Set.new
        end

        # Walks a list of statements: a class, module or file body.
        # @param statements [Array] Ripper nodes
        # @param nesting [Array<String>] enclosing constant names
        # @param singleton [Boolean] inside `class << self`
        def body(statements, nesting, singleton:)
          statements = statements[1] if statements.is_a?(Array) && statements.first == :bodystmt
          statements = Array(statements)
          @private_constants.merge(private_constant_names(statements, nesting))
          hidden = hidden_names(statements)
          visibility = :public
          statements.each do |node|
            next unless node.is_a?(Array)
            case node.first
            when :class, :module
              namespace(node, nesting)
            when :sclass
              body(node[2][1], nesting, singleton: true) if node[1] == [:var_ref, [:@kw, "self", node[1][1][2]]]
            when :def, :defs
              method(node, nesting, singleton: singleton || node.first == :defs, visibility: visibility, hidden: hidden)
            when :assign
              constant(node, nesting)
            when :alias
              @definitions << "#{nesting.join("::")}##{node[1][1][1]}" if node[1].first == :symbol_literal
            when :vcall, :var_ref, :command
              name = call_name(node)
              if VISIBILITY_KEYWORDS.include?(name)
                if node.first == :command
                  arguments(node).each do |argument|
                    next unless %i[def defs].include?(argument.first)
                    method(argument, nesting, singleton: singleton, visibility: name.to_sym, hidden: hidden)
                  end
                else
                  visibility = name.to_sym
                end
              elsif ATTRIBUTE_KEYWORDS.include?(name)
                attributes(node, nesting, hidden, singleton: singleton, report: visibility == :public)
              elsif name == "alias_method"
                alias_name = arguments(node).first
                @definitions << "#{nesting.join("::")}##{alias_name[1][1][1]}" if alias_name&.first == :symbol_literal
              end
            end
          end
        end

        private

        def namespace(node, nesting)
          name_node = node[1]
          name = constant_path(name_node)
          line = position(name_node).first
          full = (nesting + [name]).join("::")
          @definitions << full
          @namespaces[full] << {
            file: @file, line: line, documented: documented?(line),
            private: @private_constants.include?(full)
          }
          inner = node.first == :class ? node[3] : node[2]
          body(inner, nesting + [name], singleton: false)
        end

        def method(node, nesting, singleton:, visibility:, hidden:)
          name_node = node.first == :def ? node[1] : node[3]
          name = name_node[1]
          owner = nesting.join("::")
          @definitions << "#{owner}#{singleton ? "." : "#"}#{name}"
          @definitions << "#{owner}.#{name}" if visibility == :module_function
          # module_function makes a public singleton copy of each method (the instance one private)
          singleton ||= visibility == :module_function
          return if !%i[public module_function].include?(visibility) || hidden.include?([name, singleton])
          return if @private_constants.include?(nesting.join("::"))
          params = node.first == :def ? node[2] : node[4]
          return if name == "initialize" && !singleton && !parameters?(params)
          line = position(name_node).first
          report(line, "#{nesting.join("::")}#{singleton ? "." : "#"}#{name}")
        end

        def constant(node, nesting)
          target = node[1]
          return unless target.first == :var_field && target[1].first == :@const
          name = target[1][1]
          full = (nesting + [name]).join("::")
          @definitions << full
          value = node[2]
          value = value[1] if value.first == :method_add_block
          return unless CONSTANT_BUILDERS.include?(builder_call(value))
          return if @private_constants.include?(full)
          report(target[1][2].first, full)
          block = node[2].first == :method_add_block ? node[2][2] : nil
          body(block_statements(block), nesting + [name], singleton: false) if block
        end

        def attributes(node, nesting, hidden, singleton:, report:)
          names = arguments(node).filter_map { |argument| argument[1][1][1] if argument.first == :symbol_literal }
          prefix = "#{nesting.join("::")}#{singleton ? "." : "#"}"
          names.each do |name|
            @definitions << "#{prefix}#{name}" unless call_name(node) == "attr_writer"
            @definitions << "#{prefix}#{name}=" unless call_name(node) == "attr_reader"
          end
          shown = names.reject { |name| hidden.include?([name, false]) }
          # one comment above the line covers every name on it
          report(position(node[2]).first, "#{nesting.join("::")}##{shown.first}") if report && shown.any?
        end

        def report(line, name)
          return if documented?(line) || @private_constants.include?(name)
          @missing << Missing.new(@file, line, name)
        end

        def documented?(line)
          @comment_lines.include?(line - 1)
        end

        # Names made non-public by `private :a, :b`, `protected :a`, `private_class_method :a`
        # anywhere in the same body: [name, singleton?] pairs.
        def hidden_names(statements)
          statements.each_with_object(Set.new) do |node, names|
            next unless node.is_a?(Array) && node.first == :command
            singleton = call_name(node) == "private_class_method"
            next unless singleton || %w[private protected].include?(call_name(node))
            arguments(node).each do |argument|
              names << [argument[1][1][1], singleton] if argument.first == :symbol_literal
            end
          end
        end

        def private_constant_names(statements, nesting)
          statements.each_with_object([]) do |node, names|
            next unless node.is_a?(Array) && node.first == :command && call_name(node) == "private_constant"
            arguments(node).each do |argument|
              names << (nesting + [argument[1][1][1]]).join("::") if argument.first == :symbol_literal
            end
          end
        end

        def call_name(node)
          ident = node[1]
          ident.is_a?(Array) && ident.first == :@ident ? ident[1] : nil
        end

        def arguments(node)
          args = node[2]
          args = args[1] if args.is_a?(Array) && args.first == :args_add_block
          Array(args).select { |argument| argument.is_a?(Array) }
        end

        def builder_call(node)
          return unless node.is_a?(Array)
          node = node[1] if node.first == :method_add_arg
          return unless node.is_a?(Array) && node.first == :call
          receiver = node[1]
          return unless receiver.is_a?(Array) && receiver.first == :var_ref && receiver[1].first == :@const
          [receiver[1][1], node[3][1]]
        end

        def block_statements(block)
          inner = block[2]
          inner = inner[1] if inner.is_a?(Array) && inner.first == :bodystmt
          inner
        end

        def parameters?(params)
          params = params[1] if params.is_a?(Array) && params.first == :paren
          params.is_a?(Array) && params.drop(1).any? { |group| group && group != [] && group != 0 }
        end

        def constant_path(node)
          case node.first
          when :const_ref, :var_ref, :top_const_ref then node[1][1]
          when :const_path_ref then "#{constant_path(node[1])}::#{node[2][1]}"
          else raise ArgumentError, "#{@file}: unexpected class name node #{node.first}"
          end
        end

        def position(node)
          return node[2] if node.is_a?(Array) && node.first.is_a?(Symbol) && node.first.to_s.start_with?("@")
          node.each do |child|
            next unless child.is_a?(Array)
            found = position(child)
            return found if found
          end
          nil
        end
      end
    end
  end
end

class DocsTest < Minitest::Test
  ROOT = File.expand_path("..", __dir__)
  SOURCES = Dir[File.join(ROOT, "{lib,apps/ringpool/lib}", "**", "*.rb")].to_h do |path|
    [path.delete_prefix("#{ROOT}/"), File.read(path)]
  end

  # Public definitions left without a comment on purpose, with the reason.
  FOREIGN = "another library's namespace, reopened to add Weft's part to it"
  EXEMPT = {
    "ActiveRecord" => FOREIGN,
    "ActiveRecord::ConnectionAdapters" => FOREIGN,
    "Rack" => FOREIGN,
    "Rack::Handler" => FOREIGN,
    "Rackup" => FOREIGN,
    "Rackup::Handler" => FOREIGN,
    "Sequel" => FOREIGN,
    "Fiber" => FOREIGN
  }.freeze

  GUIDES = Dir[File.join(ROOT, "{README.md,docs/*.md,apps/ringpool/README.md}")].to_h do |path|
    [path.delete_prefix("#{ROOT}/"), File.read(path)]
  end
  C_SOURCES = Dir[File.join(ROOT, "ext", "**", "*.c")].map { |path| File.read(path) }

  # What lib/, apps/ringpool/lib and ext/ define.
  DEFINED = Weft::Test::DocCoverage.definitions(SOURCES) | Weft::Test::DocCoverage.native_definitions(C_SOURCES)

  # Paths the guides and comments name on purpose that are not in the repository, with the reason.
  ELSEWHERE = {
    "bin/rails" => "a Rails application's own script"
  }.freeze
  # What `rake compile` builds for each Ruby (not committed).
  BUILT = %r{\Alib/weft/\w+/ruby-\d+\.\d+\.\d+/\w+\.so\z}

  # The committed files and their folders. Checking against the checkout's files instead let a
  # build product (a C extension compiled on this machine) pass here and fail on a fresh clone.
  COMMITTED = begin
    files = IO.popen(["git", "-C", ROOT, "ls-files", "-z"], err: File::NULL, &:read).split("\0")
    raise "git ls-files listed nothing" if files.empty?
    files.each_with_object(Set.new) do |file, committed|
      parts = file.split("/")
      parts.size.times { |depth| committed << parts[0..depth].join("/") }
    end
  end

  # @return [Boolean] whether PATH (relative to the root, or else to the folder of the file
  #   that names it) is committed, is a build, or is named on purpose though it is not
  def in_repository?(path, named_in)
    beside = File.expand_path(path, File.join(ROOT, File.dirname(named_in))).delete_prefix("#{ROOT}/")
    ELSEWHERE.key?(path) || BUILT.match?(path) || COMMITTED.include?(path.chomp("/")) || COMMITTED.include?(beside)
  end

  # @return [Array<String>] "file:line name" for each name in `text` that nothing defines
  #   (`Class.new` counts as defined when the class is)
  def undefined_references(file, text)
    Weft::Test::DocCoverage.references(text).filter_map do |line, name|
      next if DEFINED.include?(name) || (name.end_with?(".new") && DEFINED.include?(name.delete_suffix(".new")))
      "#{file}:#{line} #{name}"
    end
  end

  def test_every_weft_name_in_the_guides_is_defined
    unknown = GUIDES.flat_map { |file, text| undefined_references(file, text) }
    assert_empty unknown.uniq, "the guides name classes or methods lib/ and ext/ do not define (renamed or gone?)"
  end

  def test_every_weft_name_and_path_in_the_doc_comments_exists
    stale = SOURCES.flat_map do |file, source|
      comments = source.lines.map { |line| line.lstrip.start_with?("#") ? line : "\n" }.join
      paths = Weft::Test::DocCoverage.paths(comments).filter_map do |line, path|
        "#{file}:#{line} #{path}" unless in_repository?(path, file)
      end
      undefined_references(file, comments) + paths
    end
    assert_empty stale, "comments in lib/ name classes, methods or files that do not exist (renamed or gone?)"
  end

  def test_every_repository_path_in_the_guides_exists
    missing = GUIDES.flat_map do |file, text|
      Weft::Test::DocCoverage.paths(text).filter_map do |line, path|
        "#{file}:#{line} #{path}" unless in_repository?(path, file)
      end
    end
    assert_empty missing, "the guides name files that are not in the repository"
  end

  def test_every_public_definition_in_lib_has_a_comment_above_it
    missing = Weft::Test::DocCoverage.missing(SOURCES)
    exempt, missing = missing.partition { |entry| EXEMPT.key?(entry.name) }
    assert_empty EXEMPT.keys - exempt.map(&:name), "EXEMPT names definitions that are documented now, or gone"
    assert_empty missing.map(&:to_s), "public definitions without a comment right above them " \
      "(document them, or add them to EXEMPT in #{__FILE__} with the reason)"
  end
end


# The checker itself: it must see a public method without a comment wherever one can be added,
# and must not count what Ruby makes private.
class DocCoverageTest < Minitest::Test
  def names(source)
    Weft::Test::DocCoverage.missing("example.rb" => source).map(&:name)
  end

  def test_reports_an_undocumented_public_method_and_its_line
    missing = Weft::Test::DocCoverage.missing("example.rb" => <<~RUBY)
      # Documented.
      class Shelf
        # Documented.
        def fill; end

        def empty; end
      end
    RUBY
    assert_equal ["example.rb:6 Shelf#empty"], missing.map(&:to_s)
  end

  def test_a_blank_line_breaks_the_comment_off
    assert_equal ["Shelf#empty"], names(<<~RUBY)
      # Documented.
      class Shelf
        # Not this method's: a blank line follows.

        def empty; end
      end
    RUBY
  end

  def test_singleton_methods_attributes_and_built_constants_count
    assert_equal %w[Shelf.build Shelf.open Shelf#size Shelf::Slot Shelf::Slot#label Shelf.helper],
      names(<<~RUBY)
        # Documented.
        class Shelf
          def self.build; end

          class << self
            def open; end
          end

          attr_reader :size, :width

          Slot = Struct.new(:index) do
            def label; end
          end

          module_function

          def helper; end
        end
      RUBY
  end

  def test_private_and_protected_methods_are_exempt
    assert_empty names(<<~RUBY)
      # Documented.
      class Shelf
        def initialize; end

        private def hidden; end

        def named; end
        private :named

        def self.made; end
        private_class_method :made

        Hidden = Struct.new(:a) do
          def label; end
        end
        private_constant :Hidden

        protected

        def compare; end

        private

        attr_reader :secret

        def helper; end

        class << self
          private

          def singleton_helper; end
        end
      end
    RUBY
  end

  def test_public_after_private_counts_again_and_so_does_initialize_with_parameters
    assert_equal ["Shelf#initialize", "Shelf#shown"], names(<<~RUBY)
      # Documented.
      class Shelf
        def initialize(size); end

        private

        def helper; end

        public

        def shown; end
      end
    RUBY
  end

  def test_a_namespace_needs_a_comment_at_one_of_its_definition_sites
    assert_equal ["Shelf", "Shelf::Rack"], Weft::Test::DocCoverage.missing(
      "a.rb" => "module Shelf\n  # Documented.\n  module Plank; end\nend\n",
      "b.rb" => "module Shelf\n  module Rack; end\nend\n",
      "c.rb" => "# Documented.\nmodule Crate\nend\n",
      "d.rb" => "module Crate\nend\n"
    ).map(&:name).sort
  end
end
