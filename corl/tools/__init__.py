"""Offline commands: ``corl report`` (:mod:`.report`), ``corl compare`` (:mod:`.compare`) with its
claims and verdicts (:mod:`.claims`), and the generated recipe reference (:mod:`.reference`)."""
