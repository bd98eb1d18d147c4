# frozen_string_literal: true

# The app's base model.
class ApplicationRecord < ActiveRecord::Base
  primary_abstract_class

  # Stands for a slow query (a report, a search): PostgreSQL sleeps for the given seconds.
  # @param seconds [Float]
  # @return [void]
  def self.slow_query(seconds)
    connection_pool.with_connection { |connection| connection.select_value("select 1 from pg_sleep(#{Float(seconds)})") }
  end
end
