# frozen_string_literal: true

# SEED_AUTHORS authors (default 200): "Author 1", "Author 2"... with ids 1, 2... in a fresh
# database. Running it again adds none.
count = Integer(ENV.fetch("SEED_AUTHORS", "200"))
Author.upsert_all((1..count).map { |number| { name: "Author #{number}" } }, unique_by: :name)
