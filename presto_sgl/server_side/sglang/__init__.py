"""What runs inside an SGLang server's processes: the one-pass plugin (:mod:`.plugin`) and
the opt-in hooks it installs (:mod:`.attention`, :mod:`.sampling`, :mod:`.profile`).
Nothing is imported here: SGLang's processes load the plugin module alone."""
