#!/bin/bash
echo 'port = 8123' > /app/service.conf
