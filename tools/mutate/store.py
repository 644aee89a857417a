"""The JSON files of a work folder (mutants.json, build.json, result.json), written atomically so
an interrupted build or run never leaves half a file that the report would misread. Also read by
mutate_device.py on the GPU machine."""
import json
import os


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
