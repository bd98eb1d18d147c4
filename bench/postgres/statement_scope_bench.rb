# frozen_string_literal: true

# CPU per StatementScope.session_state? call on the SQL of the Rails app's request
# (test/postgres/apps/rails_app, PostsController#create as Rails 8.1 sends it with prepared
# statements off: values written into the text), in µs per statement. The adapter asks once or
# twice for every statement it sends (RoutedConnection#exec_params, #async_exec, #on_lease).
#
#   ruby -Ilib bench/postgres/statement_scope_bench.rb [iterations] [rounds] [test]
#
# `test` is what is timed: session_state (the default), transaction_role (what Pool#query asks
# of every statement: StatementScope.transaction_role), begin_regexp (what Pool#query asked
# before that: its own BEGIN regexp, for comparison), adapter (what the ActiveRecord adapter and
# Pool#query_stateless ask of an unfrozen text: the adapter's own test, then transaction_end?)
# or adapter_before (the same test, then Pool#query's transaction_role, as before
# query_stateless: the session test ran twice).
#
# Give another lib/ with -I to measure another version of the file (before/after a change; one
# from before it moved to lib/weft/postgres/ too).
begin
  require "weft/postgres/statement_scope"
rescue LoadError # a lib/ from before it moved there from the ActiveRecord adapter
  require "active_record/connection_adapters/weft_postgresql/statement_scope"
end

SQL = [
  %(SELECT "authors".* FROM "authors" WHERE "authors"."id" = 17 LIMIT 1),
  "BEGIN",
  %(SELECT 1 AS one FROM "posts" WHERE "posts"."title" = 'post 48213 from fiber 117' LIMIT 1),
  %(INSERT INTO "posts" ("author_id", "title", "created_at", "updated_at") VALUES (17, 'post 48213 from fiber 117', ) +
    %('2026-12-07 03:05:12.345678', '2026-12-07 03:05:12.345678') RETURNING "id"),
  "COMMIT",
  %(SELECT "posts".* FROM "posts" WHERE "posts"."author_id" = 17 ORDER BY "posts"."created_at" DESC LIMIT 5),
  %(SELECT "authors".* FROM "authors" WHERE "authors"."id" = 17),
  "SELECT pg_sleep(0.05)"
].map(&:freeze).freeze
# The adapters' texts are built per call: unfrozen, so transaction_role remembers nothing.
UNFROZEN = SQL.map(&:dup).freeze

scope =
  if defined?(Weft::Postgres::StatementScope)
    Weft::Postgres::StatementScope
  else
    ActiveRecord::ConnectionAdapters::WeftPostgreSQL::StatementScope
  end
iterations = Integer(ARGV[0] || 200_000)
rounds = Integer(ARGV[1] || 5)
test = ARGV[2] || "session_state"
BEGIN_REGEXP = /\A\s*(?:begin|start\s+transaction)\b/i # Pool::TRANSACTION_START until it used StatementScope
TESTS = %w[session_state transaction_role begin_regexp adapter adapter_before].freeze
abort "unknown test #{test}: #{TESTS.join(', ')}" unless TESTS.include?(test)
raise "a statement of the app counts as session state" if SQL.any? { |sql| scope.session_state?(sql) }

puts "#{RUBY_DESCRIPTION}, #{$LOADED_FEATURES.grep(/statement_scope/).first}, #{test}"
rounds.times do
  started = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
  i = 0
  while i < iterations
    # A loop per test: a lambda called for each statement would add its call to every figure.
    case test
    when "session_state" then SQL.each { |sql| scope.session_state?(sql) }
    when "transaction_role" then SQL.each { |sql| scope.transaction_role(sql) }
    when "adapter"
      UNFROZEN.each { |sql| scope.transaction_statement?(sql) || scope.session_state?(sql) || scope.transaction_end?(sql) }
    when "adapter_before"
      UNFROZEN.each { |sql| scope.transaction_statement?(sql) || scope.session_state?(sql) || scope.transaction_role(sql) }
    else SQL.each { |sql| sql.match?(BEGIN_REGEXP) }
    end
    i += 1
  end
  cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - started
  printf("%.3f µs per statement\n", cpu / (iterations * SQL.size) * 1e6)
end
