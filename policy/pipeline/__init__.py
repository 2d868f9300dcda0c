"""The offline pipeline that makes a policy directory: a constitution in plain English
compiled into rules (``compiler``), checked against scenarios (``scenarios``, ``verifier``),
and each server's tools and prompts annotated (``heuristic``, ``llm_annotator``) into
``tool-annotations.json`` (``annotations_file``), with the LLM behind one small interface
(``llm``). Nothing here runs while a session serves requests.
"""
