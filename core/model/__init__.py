"""The model boundary: where a model lives (:class:`~interplay.model.endpoint.Endpoint`), the
client every Chat Completions call interplay makes goes through
(:mod:`interplay.model.client`), and the embedded default model (:mod:`interplay.model.local`).
"""
