"""Codecs: turn input items into stored payloads (encode) and payloads into samples (decode)."""
