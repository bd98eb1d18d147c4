# frozen_string_literal: true

module Weft
  class Server
    # Makes text that came from a client (or from an app's env, which a client's request
    # filled) safe to write into a log line: `"` and `\` (which end or escape the Common Log
    # Format's quoted fields), control bytes (a line break forges a new line; escape sequences
    # reach whoever reads the log in a terminal) and bytes past ASCII become `\xHH`, as nginx
    # writes its access log. The request line's parser lets only `"` and `\` of these through,
    # but PATH_INFO is the app's by the time the line is written (routers and middleware
    # rewrite it), so every such field is escaped.
    module LogText
      # Matched against ASCII-only text of any encoding (no allocation)...
      UNSAFE_ASCII = /[\x00-\x1F"\\\x7F]/.freeze
      # ...and against the bytes of any other.
      UNSAFE = /[\x00-\x1F"\\\x7F-\xFF]/n.freeze
      private_constant :UNSAFE_ASCII, :UNSAFE

      module_function

      # @param text [String, nil] (a String with bytes invalid in its encoding is escaped too)
      # @return [String] `text` itself when nothing needs escaping (the usual case: one match?
      #   and no allocation), else an escaped binary copy
      def escape(text)
        text = text.to_s
        return text if text.ascii_only? && !UNSAFE_ASCII.match?(text)
        text.b.gsub(UNSAFE) { |byte| format("\\x%02X", byte.ord) }
      end
    end
  end
end
