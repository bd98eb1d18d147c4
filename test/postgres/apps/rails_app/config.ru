# frozen_string_literal: true

# `weft serve`, `puma` and `falcon serve` all start the app from here.
require_relative "config/environment"

# WEFT_PG_TRACE=path: each request's start and end on the pool's timeline
# (bench/postgres/rails_trace.rb).
use Weft::Postgres::Trace::Middleware if Weft::Postgres::Trace::ON

run Rails.application
