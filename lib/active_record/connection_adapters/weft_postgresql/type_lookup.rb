# frozen_string_literal: true

require "active_record/type"

module ActiveRecord
  module ConnectionAdapters
    module WeftPostgreSQL
      # ActiveRecord finds adapter-specific attribute types (`attribute :span, :interval`,
      # arrays, ranges...) by the configuration's adapter name; the PostgreSQL ones are
      # registered for :postgresql. A weft_postgresql model looks them up there, since its SQL
      # and types are PostgreSQL's. Prepended to ActiveRecord's type registry when the adapter
      # loads; lookups for other adapters are left alone.
      module TypeLookup
        # @see ActiveRecord::Type::AdapterSpecificRegistry#lookup
        def lookup(symbol, *args, adapter: nil, **kwargs)
          super(symbol, *args, adapter: adapter == :weft_postgresql ? :postgresql : adapter, **kwargs)
        end
      end
    end
  end

  Type::AdapterSpecificRegistry.prepend(ConnectionAdapters::WeftPostgreSQL::TypeLookup)
end
