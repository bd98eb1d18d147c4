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
      # In a message (an exception's): a line break (CR LF counts as one, so that a message
      # from Windows does not leave `\x0D` at each line's end), kept as a continuation line
      # (MESSAGE_LINE_BREAK), and control bytes but tab...
      MESSAGE_UNSAFE_ASCII = /\r?\n|[\x00-\x08\x0B-\x1F\x7F]/.freeze
      # ...in UTF-8 text, the C1 controls too (U+0080-U+009F: some terminals take U+009B for
      # the start of an escape sequence)...
      MESSAGE_UNSAFE_UTF8 = /\r?\n|[\x00-\x08\x0B-\x1F\x7F\u0080-\u009F]/u.freeze
      # ...and in any other text, every byte past ASCII (as #escape).
      MESSAGE_UNSAFE = /\r?\n|[\x00-\x08\x0B-\x1F\x7F-\xFF]/n.freeze
      # What a line break of a message becomes: a line that starts with a tab, as the lines of
      # a backtrace do, so that no line of a message can pass for a log line of its own.
      MESSAGE_LINE_BREAK = "\n\t"
      private_constant :UNSAFE_ASCII, :UNSAFE, :MESSAGE_UNSAFE_ASCII, :MESSAGE_UNSAFE_UTF8, :MESSAGE_UNSAFE,
                       :MESSAGE_LINE_BREAK

      module_function

      # @param text [String, nil] (a String with bytes invalid in its encoding is escaped too)
      # @return [String] `text` itself when nothing needs escaping (the usual case: one match?
      #   and no allocation), else an escaped binary copy
      def escape(text)
        text = text.to_s
        return text if text.ascii_only? && !UNSAFE_ASCII.match?(text)
        text.b.gsub(UNSAFE) { |byte| format("\\x%02X", byte.ord) }
      end

      # Makes an error's message (which may quote what a client sent: a record's id, a header,
      # a parameter) safe for a log that gives each entry its own line: its line breaks start
      # continuation lines (indented by a tab, like the backtrace after it), other control bytes
      # become `\xHH`. Readable text is kept as it is, UTF-8 included; text with bytes invalid
      # in its encoding, or in an encoding other than UTF-8 and ASCII, has its non-ASCII bytes
      # escaped too.
      # @param text [String, nil]
      # @return [String] `text` itself when nothing needs escaping, else an escaped copy
      def escape_message(text)
        text = text.to_s
        if text.ascii_only?
          return text unless MESSAGE_UNSAFE_ASCII.match?(text)
          text.gsub(MESSAGE_UNSAFE_ASCII) { |char| message_escape(char) }
        elsif text.encoding == Encoding::UTF_8 && text.valid_encoding?
          return text unless MESSAGE_UNSAFE_UTF8.match?(text)
          text.gsub(MESSAGE_UNSAFE_UTF8) { |char| message_escape(char) }
        else
          text.b.gsub(MESSAGE_UNSAFE) { |byte| message_escape(byte) }
        end
      end

      # What #escape_message writes for a match: a line break, or the character's bytes escaped.
      def message_escape(char)
        return MESSAGE_LINE_BREAK if char.end_with?("\n")
        char.bytes.map { |byte| format("\\x%02X", byte) }.join
      end
      private_class_method :message_escape
    end
  end
end
