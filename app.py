#!/usr/bin/env python3
"""CDK app entry point: builds the training platform stack from configuration (see cdk.json)."""

import sys

from stacks.config import ConfigError
from stacks.platform_app import create_app

try:
    app, _ = create_app()
except ConfigError as error:  # a bad context value: say which, without a traceback
    sys.exit(f"Invalid configuration: {error}")
app.synth()
