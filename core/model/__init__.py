"""The model boundary: how a model is reached (where it lives and the settings of the way there
are :class:`~interplay.config.endpoint.Endpoint`, a value the contracts speak in), the client every
Chat Completions call interplay makes goes through (:mod:`interplay.model.client`) with its
transport (:mod:`interplay.model.transport`), retry policy (:mod:`interplay.model.retries`)
and reading of what comes back (:mod:`interplay.model.wire`), the OpenAI wire format every server
interplay runs shares (a request's strict parse and shape check, :mod:`interplay.model.request`;
Responses to and from Chat Completions, :mod:`interplay.model.responses`), token capture
(:mod:`interplay.model.tokens`: the ids and logprobs a call asks for and reads back), and the
embedded default model (:mod:`interplay.model.local`, its server process
:mod:`interplay.model.local_server`, which samples the tokens itself when they are asked for:
:mod:`interplay.model.local_generation`).
"""
