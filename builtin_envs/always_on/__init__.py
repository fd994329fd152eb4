"""always_on: an assistant that lives through days of simulated time, woken by events.

The loop, in order (one episode; the ``user_sim`` step before it has made her record):

1. At load the step (:mod:`.step`, its settings in :mod:`.config`) reads the scenario and
   refuses what cannot run: seats, denied tools, an opening outside the run.
2. The run (:class:`.loop.Loop`, which composes the parts below) builds the world from the
   scenario, sets up her user sim, queues her opening (:mod:`.delivery`), gives the agent's
   seat the world's tools and its context policy (:mod:`.history`), and opens the agent's chat.
3. The next wake (:mod:`.arrivals`, the clock and the queue): the world settles, the clock
   jumps to the next event (never past one), and everything due in that minute is taken at its
   mark: world events run, she reads, and what wakes the agent waits to be told.
4. The wake (:mod:`.wakes`): each waking event becomes a line (:mod:`.delivery`, worded in
   :mod:`.prompts`) and the agent takes a turn on what the history policy sends; the clock runs
   at the task's rate only during the turn (:mod:`.clock`), and a wake in which it wrote to
   nobody gets one nudge turn.
5. Back to 3, until the end time (a final check-in), her done where it ends the run, the
   wake cap, the real-time budget (:mod:`.ending`, which also holds why the run ended), nothing
   left that can wake the agent, or a failure.
6. Her wrap-up read; then the step takes what the run leaves (:mod:`.records`, from the loop's
   read-only view of it, into ``ctx.results["always_on"]``) and closes the loop's contacts,
   sessions and world.

Imports run one way: ``step`` imports the ``loop`` and ``records``; the loop imports its parts,
``history`` and ``records`` (the view it fills); of the parts, ``wakes`` imports the other three
(``arrivals``, ``delivery``, ``ending``), ``history`` and ``prompts``, ``arrivals`` imports
``clock`` and ``ending``, ``delivery`` imports ``prompts``, and ``ending`` none of them; they
and ``records`` import ``config`` for its type alone; ``config`` imports ``history``, which imports
``prompts``; ``month`` writes the ``always-on-month`` scenario file and imports none of them. A
test holds this package, and every other, free of import cycles.
"""
