"""llama.cpp's own tools run on our files: its HF -> GGUF converter (from the
llama-cpp-python source distribution) and its quantizer (the llama-cpp-python wheel).
Reference tooling, never a dependency of the engine: `convert.py` finds or fetches the
source, runs the converter in a child process and quantizes; `driver.py` is the script that
child runs.
"""
