"""always_on: an assistant that lives through days of simulated time, woken by events.

The loop, in order (one episode; the ``user_sim`` step before it has made her record):

1. At load the step (:mod:`.step`, its settings in :mod:`.config`) reads the scenario and
   refuses what cannot run: seats, denied tools, an opening outside the run.
2. The run (:class:`.loop.Loop`) builds the world from the scenario, sets up her user sim,
   queues her opening, gives the agent's seat the world's tools and its context policy
   (:mod:`.history`), and opens the agent's chat.
3. The next wake: the world settles, the clock jumps to the next event (never past one), and
   everything due in that minute is taken at its mark: world events run, she reads, and what
   wakes the agent waits to be told.
4. The wake: each waking event becomes a line (:mod:`.prompts`) and the agent takes a turn on
   what the history policy sends; the clock runs at the task's rate only during the turn
   (:mod:`.clock`), and a wake in which it wrote to nobody gets one nudge turn.
5. Back to 3, until the end time (a final check-in), her done where it ends the run, the
   wake cap, the real-time budget, nothing left that can wake the agent, or a failure.
6. Her wrap-up read; then the step takes what the run leaves (:mod:`.records`, into
   ``ctx.results["always_on"]``) and closes the loop's contacts, sessions and world.

Imports run one way: ``step`` imports ``records``, which reads the ``loop``; the loop imports
``clock``, ``history``, ``prompts`` and ``config``; ``config`` imports ``history``, which
imports ``prompts``; ``month`` writes the ``always-on-month`` scenario file and imports none of
them. A test holds this package, and every other, free of import cycles.
"""
