"""The run: agents and chat sessions (:mod:`~interplay.run.agent`), episodes
(:mod:`~interplay.run.episode`), and ``interplay eval``'s machinery: its config, the results
folder, the summary, the progress display, and the processes episodes run in.
"""
