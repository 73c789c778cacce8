"""What serves the AI device's requests: the model side of harness/devices/virtio_ai.py.

    base.py     the interface the device calls (AiBackend: facts for the config space,
                submit(prompt ids, Sampling, on_token, on_done) -> Handle with cancel)
    local.py    LoadedModel: the in-process pyllm engine (the default)
    remote.py   RemoteBackend: an OpenAI-compatible server (vLLM, `harness serve`) over HTTP,
                `--engine http://HOST:PORT/v1 --model NAME`

The device keeps the virtio side (chains, config space, statuses, guest RAM); a backend never
touches the machine: it calls back from its own threads and the device posts to the
emulation thread. Fault injection (harness/devices/ai_faults.py) wraps a backend.
"""
