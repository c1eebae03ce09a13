"""Records: the effects (intents, outcomes, decisions), the errors, the event bus,
what a merge did, and the wire forms of all of them. Pure data: no git, no I/O."""
