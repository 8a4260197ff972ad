"""The lock chain and what anchors it: the hash chain (``lock``), its anchors in git
(``anchors``, on ``gitinfo``), run and gradient-test seals (``seal``, ``gradient_seal``),
sequential looks (``look_chain``) and RFC 3161 timestamps (``timestamp``)."""
