# frozen_string_literal: true

# The Rails benchmark's request without Rails or HTTP: the statements weft_postgresql sends for
# `POST /authors/:id/posts` (test/postgres/apps/rails_app), straight to a Weft::Postgres::Pool
# of 5 connections, at fixed arrival rates. For finding where a request's time goes when the
# tail grows (issue #12).
#
#   bundle exec ruby bench/postgres/tail_bench.rb [seconds] [rates] [via]   # default 10 20,40,60,80 pool
#
# `via`: `pool` sends the statements itself; `activerecord` runs the app's own controller code
# (its models, in the Rails executor, as a request would) in this process on weft_postgresql.
#
# Each request, as the adapter routes it: the author (Pool#query); a transaction on a leased
# connection (Pool#lease, then BEGIN, the uniqueness check, the insert, COMMIT on it); the
# author's five newest posts and their author (two Pool#query); `select 1 from pg_sleep(0.05)`
# (Pool#query). The ceiling is 100 requests/s (5 connections, 0.05 s of sleep each).
#
# PIPELINING=off runs the pool without pipelining (each statement takes a connection for
# itself, first come first served): what a pool without shared connections does.
#
# Requests start at fixed times (request i at i / rate s), each in a fiber of its own whatever
# became of those before it, and a request's latency counts from its planned start, so a
# stall shows in every request it delays (no coordinated omission). A statement's wait is its
# time less what it takes on an idle pool (measured first, alone); a lease's wait is the time
# Pool#lease takes.

require_relative "support"
require "weft/postgres"

module PostgresBench
  # The fixed-rate reproducer.
  module TailBench
    CONNECTIONS = 5
    AUTHORS = 200
    SLEEP = 0.05
    WARMUP = 2 # seconds at each rate before the measured part

    # The statements of one request, by kind (the sleep's SQL is the app's).
    FIND = "select authors.* from authors where authors.id = $1 limit $2"
    UNIQUE = "select 1 as one from posts where posts.title = $1 and posts.author_id = $2 limit $3"
    INSERT = "insert into posts (author_id, title, created_at, updated_at) values ($1, $2, now(), now()) returning id"
    RECENT = "select posts.* from posts where posts.author_id = $1 order by posts.id desc limit $2"
    PRELOAD = "select authors.* from authors where authors.id = $1"
    SLOW = "select 1 from pg_sleep(#{SLEEP})".freeze
    KINDS = %i[find lease begin unique insert commit hold recent preload sleep].freeze

    module_function

    def run(seconds, rates, via)
      pool, send_request = via == "activerecord" ? activerecord : [direct_pool, method(:request)]
      instrument_leases(pool)
      baseline = nil
      rows = nil
      Weft.run do
        baseline = measure_baseline(send_request)
        rows = rates.map { |rate| run_rate(pool, send_request, rate, seconds, baseline) }
      end
      [baseline, rows]
    ensure
      pool&.close
    end

    def direct_pool
      url = PostgresBench.database[:url]
      prepare(url)
      @pool = Weft::Postgres::Pool.new(url, limit: CONNECTIONS, pipelining: ENV["PIPELINING"] != "off")
    end

    # Boots the Rails app in this process on weft_postgresql (its database made by the app's
    # tasks, as rails_bench.rb does) and times its statements by ActiveRecord's notifications.
    # @return [Array(Weft::Postgres::Pool, #call)] the adapter's shared pool and the request
    def activerecord
      require_relative "rails_bench"
      RailsBench.prepare("weft")
      ENV.update(RailsBench.environment("weft"))
      require File.join(RailsBench::APP, "config/environment")
      ActiveSupport::Notifications.subscribe("sql.active_record") do |event|
        times = Thread.current[:tail_bench_times] # fiber-local: the request's own
        kind = kind_of_sql(event.payload[:sql])
        times[kind] << event.duration / 1000.0 if times && kind
      end
      Author.first # the shared pool exists once a statement went through it
      pool = ActiveRecord::ConnectionAdapters::WeftPostgreSQL::SharedDatabase.instance_variable_get(:@registry).values.first.pool
      request = lambda do |id, times|
        Thread.current[:tail_bench_times] = times
        Rails.application.executor.wrap do
          author = Author.find(rand(1..AUTHORS))
          Post.transaction { author.posts.create!(title: "post #{id} #{rand}") }
          Post.recent_by(author, 5).includes(:author).strict_loading.to_a
          ApplicationRecord.slow_query(SLEEP)
        end
      end
      [pool, request]
    end

    # The statement kinds of the app's request, by their SQL as ActiveRecord writes it.
    def kind_of_sql(sql)
      case sql
      when /\ABEGIN/ then :begin
      when /\ACOMMIT/ then :commit
      when /pg_sleep/ then :sleep
      when /\AINSERT/ then :insert
      when /\ASELECT 1 AS one FROM "posts"/ then :unique
      when /FROM "posts"/ then :recent
      when /FROM "authors" WHERE "authors"."id" = \S+ LIMIT/ then :find
      when /FROM "authors"/ then :preload
      end
    end

    # Times Pool#lease (the wait for a connection of one's own) and how long the lease is held
    # into the request's record.
    def instrument_leases(pool)
      pool.singleton_class.prepend(Module.new do
        def lease
          started = PostgresBench.now
          super.tap do
            Thread.current[:tail_bench_leased] = PostgresBench.now
            Thread.current[:tail_bench_times]&.[](:lease)&.<<(PostgresBench.now - started)
          end
        end

        def return_lease(...)
          leased = Thread.current[:tail_bench_leased]
          Thread.current[:tail_bench_times]&.[](:hold)&.<<(PostgresBench.now - leased) if leased
          super
        end
      end)
    end

    def prepare(url)
      conn = PG.connect(url)
      conn.exec(<<~SQL)
        drop table if exists posts; drop table if exists authors;
        create table authors (id bigserial primary key, name text not null unique,
                              created_at timestamptz not null, updated_at timestamptz not null);
        create table posts (id bigserial primary key, author_id bigint not null references authors,
                            title text not null, created_at timestamptz not null, updated_at timestamptz not null);
        create unique index on posts (author_id, title);
        insert into authors (name, created_at, updated_at)
          select 'author ' || i, now(), now() from generate_series(1, #{AUTHORS}) i;
      SQL
    ensure
      conn&.close
    end

    # One request; records each statement's seconds into `times` (kind => Array).
    def request(id, times)
      pool = @pool
      author = rand(1..AUTHORS)
      timed(times, :find) { pool.query(FIND, author, 1) }
      Thread.current[:tail_bench_times] = times
      lease = pool.lease
      begin
        raw = lease.raw
        timed(times, :begin) { raw.exec("BEGIN") }
        title = "post #{id} #{rand}"
        timed(times, :unique) { raw.exec_params(UNIQUE, [title, author, 1]) }
        timed(times, :insert) { raw.exec_params(INSERT, [author, title]) }
        timed(times, :commit) { raw.exec("COMMIT") }
      ensure
        lease.release
      end
      timed(times, :recent) { pool.query(RECENT, author, 5) }
      timed(times, :preload) { pool.query(PRELOAD, author) }
      timed(times, :sleep) { pool.query(SLOW) }
    end

    def timed(times, kind)
      started = PostgresBench.now
      value = yield
      times[kind] << PostgresBench.now - started
      value
    end

    # Each kind's median on an idle pool: requests one at a time.
    def measure_baseline(send_request)
      times = Hash.new { |hash, kind| hash[kind] = [] }
      30.times { |i| send_request.call("baseline-#{i}", times) }
      KINDS.to_h { |kind| [kind, percentile(times[kind], 50)] }
    end

    # Requests at `rate` per second for WARMUP + `seconds`; only those planned in the last
    # `seconds` count.
    def run_rate(pool, send_request, rate, seconds, baseline)
      sleep 0.5 until pool.statistics[:busy].zero?
      latencies = []
      times = Hash.new { |hash, kind| hash[kind] = [] }
      scratch = Hash.new { |hash, kind| hash[kind] = [] }
      count = (rate * (WARMUP + seconds)).round
      measured_from = (rate * WARMUP).round
      before = pool.statistics
      most_waiting = 0
      sampler = Weft.spawn do
        loop do
          most_waiting = [most_waiting, pool.statistics[:waiting]].max
          sleep 0.005
        end
      end
      started = PostgresBench.now
      arrivals = planned_arrivals(rate, count)
      tasks = Array.new(count) do |i|
        planned = started + arrivals[i]
        delay = planned - PostgresBench.now
        sleep delay if delay.positive?
        measured = i >= measured_from
        Weft.spawn do
          send_request.call("#{rate}-#{i}", measured ? times : scratch)
          latencies << PostgresBench.now - planned if measured
        end
      end
      begin
        Weft.gather(tasks)
      ensure
        sampler.cancel # else a request's error leaves it looping, and Weft.run never returns
      end
      after = pool.statistics
      { rate: rate, most_waiting: most_waiting, pipelined: (after[:pipelined] - before[:pipelined]).fdiv(after[:queries] - before[:queries]), achieved: latencies.size / seconds.to_f, latencies: latencies,
        waits: KINDS.to_h { |kind| [kind, times[kind].map { |t| t - baseline[kind] }] } }
    end

    # Seconds from the start at which each request is planned: evenly spaced, or with
    # ARRIVALS=poisson a Poisson process of the same mean rate (the same seeded sequence on
    # every run).
    def planned_arrivals(rate, count)
      return Array.new(count) { |i| i.to_f / rate } unless ENV["ARRIVALS"] == "poisson"
      random = Random.new(rate)
      at = 0.0
      Array.new(count) { at += -Math.log(1.0 - random.rand) / rate }
    end

    def percentile(values, pct)
      return 0.0 if values.empty?
      sorted = values.sort
      sorted[[((pct / 100.0) * sorted.size).ceil - 1, 0].max]
    end

    def ms(seconds)
      format("%.1f", seconds * 1000)
    end

    def report(seconds, via, baseline, rows)
      puts "`bundle exec ruby bench/postgres/tail_bench.rb #{seconds} #{rows.map { |r| r[:rate] }.join(',')} #{via}`#{" (Poisson arrivals)" if ENV['ARRIVALS'] == 'poisson'} " \
           "(#{CONNECTIONS} connections, #{seconds} s per rate after #{WARMUP} s; load before: " \
           "#{File.read('/proc/loadavg').split.first(3).join(' ')})"
      puts
      puts "Idle-pool time per statement (ms): #{KINDS.map { |k| "#{k} #{ms(baseline[k])}" }.join(', ')}"
      puts
      puts "| rate | requests | p50 ms | p90 ms | p99 ms | max ms | pipelined | waiting (max) |"
      puts "|---|---|---|---|---|---|---|---|"
      rows.each do |row|
        l = row[:latencies]
        puts "| #{row[:rate]} | #{l.size} | #{ms(percentile(l, 50))} | #{ms(percentile(l, 90))} | " \
             "#{ms(percentile(l, 99))} | #{ms(l.max || 0)} | #{(row[:pipelined] * 100).round}% | #{row[:most_waiting]} |"
      end
      puts
      puts "Wait per statement beyond its idle-pool time, p50 / p99 (ms):"
      puts
      puts "| rate | #{KINDS.join(' | ')} |"
      puts "|---|#{'---|' * KINDS.size}"
      rows.each do |row|
        cells = KINDS.map { |k| "#{ms(percentile(row[:waits][k], 50))} / #{ms(percentile(row[:waits][k], 99))}" }
        puts "| #{row[:rate]} | #{cells.join(' | ')} |"
      end
    end
  end
end

if $PROGRAM_NAME == __FILE__
  seconds = Integer(ARGV[0] || 10)
  rates = (ARGV[1] || "20,40,60,80").split(",").map { |rate| Integer(rate) }
  via = ARGV[2] || "pool"
  baseline, rows = PostgresBench::TailBench.run(seconds, rates, via)
  PostgresBench::TailBench.report(seconds, via, baseline, rows)
end
