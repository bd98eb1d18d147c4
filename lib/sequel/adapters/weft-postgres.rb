# frozen_string_literal: true

# Sequel.connect("weft-postgres://...") looks for the adapter under its URL scheme, which cannot
# be spelled with "_" (see weft_postgres.rb).
require_relative "weft_postgres"
